#include "dma_engine.h"

#include <algorithm>

#include <fmt/format.h>

namespace spyre::sim {

namespace {
constexpr uint64_t kChunkBytes = uint64_t{64} << 10;
constexpr uint64_t kReadAhead = 3;
}  // namespace

DmaEngine::DmaEngine(const sc_core::sc_module_name& name, const Config& config, uint32_t card, Endpoint& endpoint,
                     Trace& trace, CardStats& stats)
    : sc_core::sc_module(name),
      mem("mem"),
      clock_(config.chip.clock_mhz),
      endpoint_(endpoint),
      trace_(trace),
      stats_(stats),
      channels_(config.chip.dma_channels) {
  for (uint32_t c = 0; c < config.chip.dma_channels; ++c) {
    tracks_.push_back(trace.track(card, fmt::format("dma channel {}", c)));
    buffers_.emplace_back((kReadAhead + 1) * kChunkBytes);
  }
}

hw::Verdict DmaEngine::copy(const hw::CopyArgs& args, uint8_t flags, uint32_t priority) {
  if (++copies_ == fail_copy_) return {hw::ErrorCode::kDmaError, hw::Field::kCopySrc, 0};
  const uint64_t granted = channels_.acquire(channels_.all(), priority, /*any=*/true);
  const hw::Verdict v = run(static_cast<uint32_t>(__builtin_ctzll(granted)), args, flags);
  channels_.release(granted);
  return v;
}

hw::Verdict DmaEngine::run(uint32_t channel, const hw::CopyArgs& args, uint8_t flags) {
  const bool src_host = flags & hw::kCopySrcHost;
  const bool dst_host = flags & hw::kCopyDstHost;
  const uint64_t start = clock_.now_cycles();
  // Reads run kReadAhead chunks ahead of writes, so a chunk's write never waits behind the next
  // read's latency. The engine books each chunk's write when its data has arrived, and the read
  // kReadAhead chunks on at that moment: what it books on shared resources (the link, the
  // switch, memory channels, another card's memory) lies at most kReadAhead chunks ahead of
  // simulated time, so the traffic of other initiators interleaves with a long copy instead of
  // queueing behind all of it. Bandwidth servers space the transfers, so latency is paid once per
  // copy, not per chunk. Overlapping device ranges are undefined, as with memcpy.
  const uint64_t chunks = (args.size + kChunkBytes - 1) / kChunkBytes;
  std::vector<sc_core::sc_time> arrived(chunks);  // absolute
  sc_core::sc_time done = sc_core::sc_time_stamp();
  auto chunk_bytes = [&](uint64_t i) { return std::min(kChunkBytes, args.size - i * kChunkBytes); };
  uint8_t* const base = buffers_[channel].data();
  auto buffer = [&](uint64_t i) { return base + (i % (kReadAhead + 1)) * kChunkBytes; };
  // Where each chunk in flight is: its buffer, or bytes the host keeps (HostLink::keeps_bytes),
  // which device memory takes as they are instead of copying them.
  const uint8_t* chunk_at[kReadAhead + 1] = {};
  tlm::tlm_response_status write_status = tlm::TLM_OK_RESPONSE;
  auto write = [&](uint64_t i) {
    if (arrived[i] > sc_core::sc_time_stamp()) wait(arrived[i] - sc_core::sc_time_stamp());
    sc_core::sc_time t = sc_core::SC_ZERO_TIME;
    const uint64_t at = args.dst + i * kChunkBytes;
    const uint8_t* from = chunk_at[i % (kReadAhead + 1)];
    const bool kept = from != buffer(i);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): a TLM payload's data pointer is not const
    uint8_t* data = const_cast<uint8_t*>(from);
    const bool ok = dst_host ? endpoint_.host_write(at, data, chunk_bytes(i), t)
                             : tlm_access(mem, tlm::TLM_WRITE_COMMAND, at, data, chunk_bytes(i), t, Fabric::pcie_stop(),
                                          &write_status, /*move=*/true, kept);
    done = std::max(done, sc_core::sc_time_stamp() + t);
    return ok;
  };
  // Why a transfer failed: the link, the IOMMU, an ECC error in device memory, or a host that cannot
  // back the written memory.
  const auto failed = [&](bool host, tlm::tlm_response_status status, hw::Field field) {
    if (host && endpoint_.link_down()) return hw::Verdict{hw::ErrorCode::kLinkDown, field, 0};
    return hw::Verdict{host ? hw::ErrorCode::kDmaFault : memory_error(status, hw::ErrorCode::kDmaFault), field, 0};
  };
  for (uint64_t i = 0; i < chunks + kReadAhead; ++i) {
    if (i >= kReadAhead && !write(i - kReadAhead)) return failed(dst_host, write_status, hw::Field::kCopyDst);
    if (i < chunks) {
      sc_core::sc_time t = sc_core::SC_ZERO_TIME;
      const uint64_t at = args.src + i * kChunkBytes;
      tlm::tlm_response_status status = tlm::TLM_OK_RESPONSE;
      const uint8_t*& from = chunk_at[i % (kReadAhead + 1)];
      from = buffer(i);
      if (src_host && !dst_host) {
        from = endpoint_.host_read_kept(at, buffer(i), chunk_bytes(i), t);
      } else if (src_host ? !endpoint_.host_read(at, buffer(i), chunk_bytes(i), t)
                          : !tlm_access(mem, tlm::TLM_READ_COMMAND, at, buffer(i), chunk_bytes(i), t,
                                        Fabric::pcie_stop(), &status)) {
        from = nullptr;
      }
      if (!from) return failed(src_host, status, hw::Field::kCopySrc);
      arrived[i] = sc_core::sc_time_stamp() + t;
    }
  }
  if (done > sc_core::sc_time_stamp()) wait(done - sc_core::sc_time_stamp());
  const char* kind = src_host ? "copy h2d" : (dst_host ? "copy d2h" : "copy d2d");
  (src_host ? stats_.h2d_bytes : (dst_host ? stats_.d2h_bytes : stats_.d2d_bytes)) += args.size;
  trace_.slice(tracks_[channel], kind, start, clock_.now_cycles(), {{"bytes", args.size}});
  return {};
}

}  // namespace spyre::sim
