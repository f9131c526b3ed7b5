// The card's DMA engine: executes copy descriptors between host memory (across the PCIe
// endpoint) and device memory, or within device memory, in chunks whose source read and
// destination write overlap. It has chip.dma_channels channels, so copies of several queues run
// at once and share the link and memory bandwidth.
#pragma once

#include <cstdint>
#include <vector>

#include <tlm_utils/simple_initiator_socket.h>

#include "arbiter.h"
#include "endpoint.h"
#include "fabric.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/errors.h"
#include "timing.h"
#include "trace.h"

namespace spyre::sim {

class DmaEngine : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<DmaEngine> mem;

  DmaEngine(const sc_core::sc_module_name& name, const Config& config, uint32_t card, Endpoint& endpoint, Trace& trace,
            CardStats& stats);

  /// Runs a copy that the firmware has validated on a free channel, waiting for one ahead of
  /// lower-`priority` copies; must be called from a SystemC thread. Returns a DMA fault (naming
  /// copy.src or copy.dst) when the IOMMU refuses a host range, an ECC error when a device read
  /// hits one, and a link-down error when the PCIe link is down.
  hw::Verdict copy(const hw::CopyArgs& args, uint8_t flags, uint32_t priority);
  /// Fault injection: the n-th copy (from 1) fails with a DMA transfer error before it moves a byte.
  void fail_copy(uint64_t n) { fail_copy_ = n; }

 private:
  hw::Verdict run(uint32_t channel, const hw::CopyArgs& args, uint8_t flags);

  Clock clock_;
  Endpoint& endpoint_;
  Trace& trace_;
  CardStats& stats_;
  std::vector<uint32_t> tracks_;               // per channel
  std::vector<std::vector<uint8_t>> buffers_;  // per channel: the chunks in flight
  Arbiter channels_;
  uint64_t copies_ = 0;
  uint64_t fail_copy_ = 0;
};

}  // namespace spyre::sim
