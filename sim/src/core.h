// One AI core: a 2 MB scratchpad (LX), the PT matmul arrays of its corelets and the SFP vector
// units. Executes tile-ISA programs from device memory; every instruction is one timed event
// whose latency comes from the config (compute) or from the memory and ring servers (loads/stores).
#pragma once

#include <cstdint>
#include <vector>

#include <tlm_utils/simple_initiator_socket.h>

#include "spyre/firmware/hal.h"
#include "spyre/hw/isa.h"
#include "spyre/sim/config.h"
#include "timing.h"
#include "trace.h"

namespace spyre::sim {

/// The on-chip ring as the cores see it: one server per direction.
struct Ring {
  BandwidthServer to_cores;
  BandwidthServer from_cores;
  sc_core::sc_time latency;
};

/// The ring of a card as the config describes it.
Ring make_ring(const Config& config);

class Core : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Core> mem;

  Core(const sc_core::sc_module_name& name, uint32_t card, uint32_t id, const Config& config, Ring& ring, Trace& trace,
       CoreStats& stats);

  /// Starts `program` as the `rank`-th core of the launch, with the `args_size`-byte argument block
  /// at `args` (an instruction naming a slot past it faults).
  void start(uint64_t program, uint64_t args, uint64_t args_size, uint32_t rank);
  bool busy() const { return busy_; }
  const sc_core::sc_event& done_event() const { return done_; }
  /// Outcome of the last program: kOk or kCoreFault with detail = core << 24 | pc.
  const fw::Verdict& result() const { return result_; }

  /// Cycles that one PT matmul instruction of this shape takes (the timing model, for tests).
  uint64_t matmul_cycles(uint32_t m, uint32_t k, uint32_t n, hw::DType t) const;

 private:
  void thread();
  fw::Verdict run();
  fw::Verdict execute(const hw::Instr& in, uint32_t pc);
  bool lx_range(uint64_t addr, uint64_t n) const { return addr <= lx_.size() && n <= lx_.size() - addr; }
  fw::Verdict fault(uint32_t pc) const {
    return {hw::ErrorCode::kCoreFault, hw::Field::kNone, id_ << 24 | (pc & 0xffffff)};
  }

  const Config& config_;
  uint32_t id_;
  Clock clock_;
  Ring& ring_;
  Trace& trace_;
  CoreStats& stats_;
  uint32_t track_;
  std::vector<uint8_t> lx_;
  std::vector<uint64_t> args_;
  uint64_t program_ = 0;
  uint64_t args_addr_ = 0;
  uint32_t num_args_ = 0;
  uint32_t rank_ = 0;
  bool busy_ = false;
  fw::Verdict result_;
  sc_core::sc_event start_;
  sc_core::sc_event done_;
};

}  // namespace spyre::sim
