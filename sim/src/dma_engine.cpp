#include "dma_engine.h"

#include <algorithm>

namespace spyre::sim {

namespace {
constexpr uint64_t kChunkBytes = 64 * 1024;
}

DmaEngine::DmaEngine(const sc_core::sc_module_name& name, const Config& config, uint32_t card, Endpoint& endpoint,
                     Trace& trace, CardStats& stats)
    : sc_core::sc_module(name),
      mem("mem"),
      clock_(config.chip.clock_mhz),
      endpoint_(endpoint),
      trace_(trace),
      stats_(stats),
      track_(trace.track(card, "dma engine")),
      buffer_(kChunkBytes) {}

bool DmaEngine::mem_access(tlm::tlm_command cmd, uint64_t addr, uint8_t* data, uint64_t n, sc_core::sc_time& delay) {
  tlm::tlm_generic_payload gp;
  gp.set_command(cmd);
  gp.set_address(addr);
  gp.set_data_ptr(data);
  gp.set_data_length(static_cast<unsigned>(n));
  gp.set_streaming_width(static_cast<unsigned>(n));
  gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  mem->b_transport(gp, delay);
  return gp.is_response_ok();
}

fw::Verdict DmaEngine::copy(const hw::CopyArgs& args, uint8_t flags) {
  const bool src_host = flags & hw::kCopySrcHost;
  const bool dst_host = flags & hw::kCopyDstHost;
  const uint64_t start = clock_.now_cycles();
  // Chunks are pipelined: every read is issued at once (the source's bandwidth server spaces them),
  // and each chunk's write starts when its data has arrived. Latency is paid once, not per chunk.
  sc_core::sc_time done = sc_core::SC_ZERO_TIME;
  for (uint64_t offset = 0; offset < args.size; offset += kChunkBytes) {
    const uint64_t n = std::min(kChunkBytes, args.size - offset);
    sc_core::sc_time t = sc_core::SC_ZERO_TIME;
    const bool read_ok = src_host ? endpoint_.host_read(args.src + offset, buffer_.data(), n, t)
                                  : mem_access(tlm::TLM_READ_COMMAND, args.src + offset, buffer_.data(), n, t);
    if (!read_ok) return {hw::ErrorCode::kDmaFault, hw::Field::kCopySrc, 0};
    const bool write_ok = dst_host ? endpoint_.host_write(args.dst + offset, buffer_.data(), n, t)
                                   : mem_access(tlm::TLM_WRITE_COMMAND, args.dst + offset, buffer_.data(), n, t);
    if (!write_ok) return {hw::ErrorCode::kDmaFault, hw::Field::kCopyDst, 0};
    done = std::max(done, t);
  }
  wait(done);
  const char* kind = src_host ? "copy h2d" : (dst_host ? "copy d2h" : "copy d2d");
  (src_host ? stats_.h2d_bytes : (dst_host ? stats_.d2h_bytes : stats_.d2d_bytes)) += args.size;
  trace_.slice(track_, kind, start, clock_.now_cycles(), {{"bytes", args.size}});
  return {};
}

}  // namespace spyre::sim
