// One AI core: a 2 MB scratchpad (LX), the PT matmul arrays of its corelets and the SFP vector
// units. Executes tile-ISA programs from device memory; every instruction is one timed event
// whose latency comes from the config (compute) or from the fabric's channels and ring links
// (fetch, loads, stores). Each cycle of a program is attributed to one Stall category.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include <tlm_utils/simple_initiator_socket.h>

#include "index_tape.h"
#include "sanitizer.h"
#include "spyre/firmware/hal.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/errors.h"
#include "spyre/hw/isa.h"
#include "spyre/sim/config.h"
#include "timing.h"
#include "trace.h"
#include "worker.h"

namespace spyre::sim {

class Core;
class DeviceMemory;

/// One launch as its cores see it: the cores by rank (a multicast load writes into theirs) and its
/// BARRIER, which releases the cores once every core still running has arrived. A core that stops
/// (END or a fault) departs, so the others never wait for it forever.
class Launch {
 public:
  explicit Launch(sc_core::sc_time barrier_latency) : latency_(barrier_latency) {}
  void reset(std::vector<Core*> ranks) {
    ranks_ = std::move(ranks);
    active_ = static_cast<uint32_t>(ranks_.size());
    arrived_ = 0;
    fetches_.clear();
    races_.clear();
  }
  /// The cores of a launch fetch one program: the first core's read of [addr, addr + n) is booked
  /// on the fabric and the ring multicasts it to the others. True (and when its bytes land, in
  /// `done`) if a core of this launch has already fetched that range.
  bool fetched(uint64_t addr, uint64_t n, sc_core::sc_time* done) const {
    for (const Fetch& f : fetches_) {
      if (f.addr == addr && f.n == n) {
        *done = f.done;
        return true;
      }
    }
    return false;
  }
  void note_fetch(uint64_t addr, uint64_t n, const sc_core::sc_time& done) { fetches_.push_back({addr, n, done}); }
  /// The sanitizer's record of this launch's accesses since its last BARRIER (racecheck).
  RaceLog& races() { return races_; }
  /// The breakpoint the launch stops at, if its queue armed one.
  const std::optional<Breakpoint>& brk() const { return break_; }
  void set_break(std::optional<Breakpoint> b) { break_ = b; }
  /// Where this launch's PRINT records go (its queue's print buffer; size 0: nowhere).
  const PrintBuffer& print_buffer() const { return print_; }
  void set_print_buffer(const PrintBuffer& b) { print_ = b; }
  /// The sanitizer's checks for this launch (its queue's).
  uint64_t checks() const { return checks_; }
  void set_checks(uint64_t checks) { checks_ = checks; }
  /// The trace's flow from the launch's queue to rank r's program is flow() + r.
  uint64_t flow() const { return flow_; }
  void set_flow(uint64_t id) { flow_ = id; }
  uint32_t size() const { return static_cast<uint32_t>(ranks_.size()); }
  Core& rank(uint32_t r) const { return *ranks_.at(r); }
  /// Called from a core's thread; returns when the barrier releases.
  void arrive();
  void depart();

 private:
  void release();
  sc_core::sc_time latency_;
  struct Fetch {
    uint64_t addr, n;
    sc_core::sc_time done;
  };
  std::vector<Fetch> fetches_;
  RaceLog races_;
  std::optional<Breakpoint> break_;
  PrintBuffer print_;
  uint64_t checks_ = 0;
  uint64_t flow_ = 0;
  std::vector<Core*> ranks_;
  uint32_t active_ = 0;
  uint32_t arrived_ = 0;
  uint64_t generation_ = 0;
  sc_core::sc_event released_;
};

class Core : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Core> mem;

  /// Core `id` of card `card`, at ring stop `stop` (Fabric::core_stop).
  Core(const sc_core::sc_module_name& name, uint32_t card, uint32_t id, const Config& config, uint32_t stop,
       Trace& trace, CoreStats& stats, Worker& worker);
  ~Core() override;

  /// Starts `program` as the `rank`-th core of `launch`, with the argument block `args` (an
  /// instruction naming a slot past it faults).
  void start(uint64_t program, const fw::Arguments& args, uint32_t rank, Launch* launch);
  /// The device memory the next program may touch, [base, base + size) (size 0: all of it): its
  /// queue's window. Any fetch, load or store outside it faults with kDmaFault.
  void set_window(uint64_t base, uint64_t size) {
    window_base_ = base;
    window_size_ = size;
  }
  bool busy() const { return busy_; }
  const sc_core::sc_event& done_event() const { return done_; }
  /// Outcome of the last program: kOk, or kCoreFault, kEccError (a read hit an ECC error) or
  /// kWatchdog, with detail = core << 24 | pc.
  const hw::Verdict& result() const { return result_; }
  /// Where this core's indirect instructions record their indices, or take them from (timing
  /// mode); nullptr: neither.
  void set_index_tape(IndexTape* tape) {
    tape_ = tape;
    values_ = !(timing_ && tape_ && tape_->plays());
  }
  /// The device sanitizer that checks this core's loads and stores (nullptr: none).
  void set_sanitizer(Sanitizer* s) { sanitizer_ = s; }
  /// Device memory read without timing, for debug information (PRINT's format strings).
  void set_debug_memory(const DeviceMemory* m) { debug_memory_ = m; }
  uint32_t id() const { return id_; }
  /// Fault injection: the core hangs in its `program`-th program (from 1); 0: never.
  void hang_in(uint64_t program) { hang_in_ = program; }
  /// When the last program's code had arrived and its first instruction issued.
  const sc_core::sc_time& code_ready() const { return code_ready_; }

  /// Scratchpad pointer for `n` bytes at `addr`; nullptr when out of range.
  uint8_t* scratchpad(uint64_t addr, uint64_t n);
  /// Before the SystemC thread reads (or with `write`, overwrites) `n` scratchpad bytes at `p`:
  /// waits for the posted arithmetic that writes them (or, with `write`, that reads them too).
  void settle(const uint8_t* p, uint64_t n, bool write);

 private:
  void thread();
  hw::Verdict run();
  /// Executes one instruction; a branch sets `pc`, anything else leaves it. False on a fault.
  bool execute(const hw::Instr& in, uint32_t& pc);
  bool dma(const hw::Instr& in);
  bool indirect(const hw::Instr& in);
  bool multicast(const hw::Instr& in);
  enum class Move { kRead, kWrite, kAccumulate };
  /// Moves `rows` between device memory and `buf` (back to back there), timed on the memory and
  /// ring servers (asynchronously if the instruction says so). False on a memory error.
  bool transfer(const hw::Instr& in, const Rows& rows, uint8_t* buf, Move move);
  bool sfp(const hw::Instr& in);
  /// PRINT: a record to the launch's print buffer (spyre/hw/commands.h, PrintRecord).
  bool print(const hw::Instr& in);
  /// A PRINT record's text, formatted with its program's message (for the trace).
  std::string formatted(const hw::PrintRecord& r, const uint64_t* regs, const uint8_t* values);
  /// Scratchpad pointer for `n` bytes at `addr` + r[rl] of `in`; nullptr when out of range.
  uint8_t* lx(const hw::Instr& in, uint64_t addr, uint64_t n);
  /// A compute instruction that started at `begin_cycle` and takes `cycles` after its issue.
  void timed(uint64_t begin_cycle, uint64_t cycles, const char* name, uint64_t elements, const hw::Instr& in);
  /// Attributes the cycles since `before` to the running instruction: what it waited for the PT
  /// arrays to kCompute, then its first issue_ cycles to kIssue, the rest to stall_ (set by the
  /// instruction; kIssue when it sets nothing).
  void account(uint64_t before);
  /// Scratchpad bytes an instruction's arithmetic reads or writes.
  struct Touch {
    const uint8_t* p;
    uint64_t n;
    bool write;
  };
  // The PT arrays run beside the SFP and the DMA engine: a MATMUL goes to them (once they hold
  // fewer than chip.pt_queue_depth, running or queued) and the core issues on. An instruction that
  // touches what a MATMUL in flight writes, or writes what it reads, waits for that MATMUL; a
  // BARRIER, a breakpoint and END wait for all of them. MATMULs run in their order, one at a time.
  struct PtOp {
    uint64_t end;  // cycle its result is in the scratchpad
    Touch a, b, c;
  };
  std::vector<PtOp> pt_;    // in flight, in issue (and end) order
  uint64_t pt_free_ = 0;    // cycle the arrays finish the last MATMUL issued
  uint64_t pt_waited_ = 0;  // cycles the running instruction waited for the PT arrays
  uint32_t pt_track_ = UINT32_MAX;
  /// Waits until no MATMUL in flight conflicts with `touches` (all of them: `all`).
  void pt_wait(std::initializer_list<Touch> touches, bool all = false);
  /// Waits until at most the `latest` most recently issued MATMULs are still running.
  void pt_keep(uint32_t latest);
  /// The core's clock advances to `cycle` (if it is later), counted as waiting for the PT arrays.
  void pt_wait_until(uint64_t cycle);
  /// Records the trace slice of a compute instruction [begin, end) on `track`.
  void trace_compute(uint32_t track, uint64_t begin, uint64_t end, const char* name, uint64_t elements,
                     const hw::Instr& in);
  /// Arithmetic touching at most this many bytes runs at once when the worker has nothing of this
  /// core's queued: on tiles this small the hand-over costs more than the arithmetic.
  static constexpr uint64_t kSmallTaskBytes = 4096;
  /// Hands an instruction's arithmetic to the worker, noting the bytes it touches for settle().
  void compute(std::function<void()> task, std::initializer_list<Touch> touches);
  /// True when `n` bytes at `addr` lie in the window; otherwise sets the fault code to kDmaFault.
  bool in_window(uint64_t addr, uint64_t n);
  hw::Verdict fault(uint32_t pc) const { return {fault_code_, hw::Field::kNone, id_ << 24 | (pc & 0xffffff)}; }
  hw::Verdict hang(uint32_t pc, uint64_t deadline, const sc_core::sc_time& quantum);
  /// Stops at the launch's breakpoint before instruction `pc`: dumps the registers and the
  /// scratchpad to its buffer and reports it (kSanitizerReport, kBreakpoint).
  hw::Verdict breakpoint(uint32_t pc);
  uint32_t break_pc_ = UINT32_MAX;  // the instruction this core stops before in its program

  const Config& config_;
  uint64_t launched_ = 0;                                 // cycle the running program started at (for the watchdog)
  hw::ErrorCode fault_code_ = hw::ErrorCode::kCoreFault;  // what a failed instruction reports (kEccError)
  uint64_t programs_run_ = 0;
  uint64_t hang_in_ = 0;  // fault injection: hang in this program (from 1); 0: never
  uint64_t window_base_ = 0, window_size_ = 0;
  uint32_t card_;
  uint32_t id_;
  uint32_t stop_;
  bool functional_;  // sim.mode "functional": one cycle per instruction, no bookings on the fabric
  bool timing_;      // sim.mode "timing": every time as timed, only address-deciding arithmetic done
  IndexTape* tape_ = nullptr;
  Sanitizer* sanitizer_ = nullptr;
  const DeviceMemory* debug_memory_ = nullptr;
  /// The sanitizer's checks of a transfer, when it runs any; false (fault code kSanitizerReport) on a finding.
  bool sanitized(const Rows& rows, bool read, bool accumulate);
  // Whether this core computes and moves values: not in a replay in timing mode, whose indices come
  // from the tape, so that nothing the core could compute or move would change its time.
  bool values_ = true;
  /// Whether a transfer moves its bytes: always when timed; in timing mode only rows of an integer
  /// or bool type (the DMA instruction's dtype), which may become indices, and none in a replay.
  bool moves_bytes(const hw::Instr& in) const { return values_ && (!timing_ || !hw::dtype_is_float(in.dtype)); }
  Clock clock_;
  Stall stall_ = Stall::kIssue;  // what the running instruction's time beyond its issue is
  uint64_t issue_ = 0;           // the running instruction's issue cycles
  uint32_t at_ = 0;              // the running instruction's index: its trace slice's, its listing line
  Trace& trace_;
  CoreStats& stats_;
  uint32_t track_;
  // The scratchpad, zeroed: calloc'd, so that the host pages of what no program touches are never
  // committed (a replay in timing mode touches none).
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t[], Free> lx_;
  uint64_t lx_bytes_ = 0;
  Worker& worker_;
  uint32_t lane_;  // this core's tasks in worker_
  struct Pending {
    uint64_t ticket;
    Touch touch;
  };
  std::vector<Pending> pending_;  // posted arithmetic that may not have run yet
  uint64_t last_ticket_ = 0;
  void drop_pending(uint64_t done);  // forgets what has run up to ticket `done`
  std::vector<uint64_t> args_;
  std::vector<hw::Instr> code_;
  uint64_t regs_[hw::kNumRegs] = {};
  sc_core::sc_time tag_done_[hw::kNumDmaTags] = {};  // when each tag's last transfer lands
  bool tag_ring_[hw::kNumDmaTags] = {};              // whether the ring (not memory) set that time
  // Temporal decoupling: the time of what touches only the core's own state (compute, scalar
  // instructions, waiting for its own transfers to land, WAIT on its tags) accumulates here, and
  // the core waits it out (one SystemC switch) before anything another module sees: booking a
  // transfer on the shared servers, a barrier, the end of the program.
  sc_core::sc_time local_ = sc_core::SC_ZERO_TIME;
  void sync() {
    if (local_ == sc_core::SC_ZERO_TIME) return;
    const sc_core::sc_time t = local_;
    local_ = sc_core::SC_ZERO_TIME;
    wait(t);
  }
  /// Before booking on the fabric: at the true time. In functional mode nothing is booked, but
  /// the cores still take turns here, so that the worker computes one core's tiles while the
  /// SystemC thread moves another's data.
  void sync_to_book() { sync(); }
  uint64_t now() const { return clock_.to_cycles(sc_core::sc_time_stamp() + local_); }
  uint64_t program_ = 0;
  fw::Arguments args_block_;  // where the arguments are, or (from the host) what they are
  uint32_t num_args_ = 0;
  uint32_t rank_ = 0;
  Launch* launch_ = nullptr;
  bool busy_ = false;
  hw::Verdict result_;
  sc_core::sc_time code_ready_;
  sc_core::sc_event start_;
  sc_core::sc_event done_;
};

}  // namespace spyre::sim
