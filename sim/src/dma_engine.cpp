#include "dma_engine.h"

#include <algorithm>

namespace spyre::sim {

namespace {
constexpr uint64_t kChunkBytes = 256 * 1024;
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
  for (uint64_t done = 0; done < args.size; done += kChunkBytes) {
    const uint64_t n = std::min(kChunkBytes, args.size - done);
    sc_core::sc_time read_delay = sc_core::SC_ZERO_TIME;
    const bool read_ok = src_host ? endpoint_.host_read(args.src + done, buffer_.data(), n, read_delay)
                                  : mem_access(tlm::TLM_READ_COMMAND, args.src + done, buffer_.data(), n, read_delay);
    if (!read_ok) return {hw::ErrorCode::kDmaFault, hw::Field::kCopySrc, 0};
    // The write streams behind the read; it cannot finish before the read's first bytes arrive.
    sc_core::sc_time write_delay = sc_core::SC_ZERO_TIME;
    const bool write_ok = dst_host ? endpoint_.host_write(args.dst + done, buffer_.data(), n, write_delay)
                                   : mem_access(tlm::TLM_WRITE_COMMAND, args.dst + done, buffer_.data(), n, write_delay);
    if (!write_ok) return {hw::ErrorCode::kDmaFault, hw::Field::kCopyDst, 0};
    wait(std::max(read_delay, write_delay));
  }
  const char* kind = src_host ? "copy h2d" : (dst_host ? "copy d2h" : "copy d2d");
  (src_host ? stats_.h2d_bytes : (dst_host ? stats_.d2h_bytes : stats_.d2d_bytes)) += args.size;
  trace_.slice(track_, kind, start, clock_.now_cycles(), {{"bytes", args.size}});
  return {};
}

}  // namespace spyre::sim
