#include "core.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "latency.h"
#include "sfp.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/regs.h"
#include "tile_math.h"

namespace spyre::sim {

void Launch::arrive() {
  const uint64_t generation = generation_;
  if (++arrived_ >= active_) release();
  // Every core, the last to arrive included, continues when the release reaches it.
  do {
    sc_core::wait(released_);
  } while (generation_ == generation);
}

void Launch::depart() {
  if (active_ > 0) --active_;
  if (arrived_ > 0 && arrived_ >= active_) release();
}

void Launch::release() {
  arrived_ = 0;
  races_.clear();
  ++generation_;
  released_.notify(latency_);
}

Core::Core(const sc_core::sc_module_name& name, uint32_t card, uint32_t id, const Config& config, uint32_t stop,
           Trace& trace, CoreStats& stats, Worker& worker)
    : sc_core::sc_module(name),
      mem("mem"),
      config_(config),
      card_(card),
      id_(id),
      stop_(stop),
      functional_(config.sim.mode == "functional"),
      timing_(config.sim.mode == "timing"),
      clock_(config.chip.clock_mhz),
      trace_(trace),
      stats_(stats),
      track_(trace.track(card, fmt::format("core {:02}", id))),
      worker_(worker),
      lane_(worker.lane()) {
  sc_core::sc_spawn_options opts;
  opts.set_stack_size(1 << 20);
  sc_core::sc_spawn([this] { thread(); }, "exec", &opts);
}

Core::~Core() {
  try {
    worker_.wait(lane_, last_ticket_);  // its tasks write into lx_
  } catch (...) {
    // Deliberately empty: a task's failure was reported when it was waited for, or no one asks any more.
  }
}

void Core::drop_pending(uint64_t done) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const Pending& e) { return e.ticket <= done; }),
                 pending_.end());
}

void Core::compute(std::function<void()> task, std::initializer_list<Touch> touches) {
  const uint64_t done = worker_.done(lane_);
  drop_pending(done);
  uint64_t bytes = 0;
  for (const Touch& t : touches) bytes += t.n;
  last_ticket_ = worker_.post(lane_, std::move(task), bytes <= kSmallTaskBytes);
  if (last_ticket_ <= worker_.done(lane_)) return;  // ran inline (or already)
  for (const Touch& t : touches) {
    if (t.p && t.n) pending_.push_back({last_ticket_, t});
  }
}

void Core::settle(const uint8_t* p, uint64_t n, bool write) {
  if (pending_.empty()) return;
  uint64_t need = 0;
  for (const Pending& e : pending_) {
    if ((e.touch.write || write) && overlaps(e.touch.p, e.touch.n, p, n)) need = std::max(need, e.ticket);
  }
  if (need == 0) return;
  worker_.wait(lane_, need);  // a lane runs in order: everything up to `need` has run
  drop_pending(need);
}

void Core::start(uint64_t program, const fw::Arguments& args, uint32_t rank, Launch* launch) {
  program_ = program;
  args_block_ = args;
  num_args_ = static_cast<uint32_t>(std::min<uint64_t>(args.size / 8, hw::kMaxLaunchArgs));
  rank_ = rank;
  launch_ = launch;
  break_pc_ = UINT32_MAX;
  if (launch) {
    if (const std::optional<Breakpoint>& b = launch->brk(); b && b->rank == rank) break_pc_ = b->pc;
  }
  // Allocated before any core of the launch runs: a multicast may write here first.
  if (!lx_) {
    lx_.reset(static_cast<uint8_t*>(std::calloc(config_.chip.lx_bytes, 1)));
    if (!lx_) throw std::bad_alloc();
    lx_bytes_ = config_.chip.lx_bytes;
  }
  busy_ = true;
  start_.notify(sc_core::SC_ZERO_TIME);
}

void Core::thread() {
  for (;;) {
    wait(start_);
    const uint64_t begin = now();
    launched_ = begin;
    if (launch_) trace_.flow(track_, begin, launch_->flow() + rank_, false);
    fault_code_ = hw::ErrorCode::kCoreFault;
    result_ = run();
    sync();
    if (launch_) launch_->depart();
    const uint64_t end = now();
    ++stats_.programs;
    stats_.busy_cycles += end - begin;  // = what run() attributed, cycle for cycle
    trace_.slice(track_, result_.ok() ? "program" : "program (fault)", begin, end,
                 {{"rank", rank_}, {"program", program_}});
    busy_ = false;
    done_.notify(sc_core::SC_ZERO_TIME);
  }
}

hw::Verdict Core::run() {
  // The firmware checked the header against the launch; the core checks what it executes.
  // Each fetch depends on the one before, so each is issued when the previous one has landed:
  // booking them ahead would make the memory server queue other cores' fetches behind them.
  // The fetches cross the ring from the memory controllers to this core's stop; the cores of a
  // launch share them (Launch::fetched).
  const auto fetch = [this](uint64_t addr, void* dst, uint64_t n) {
    if (!in_window(addr, n)) return false;
    const uint64_t before = now();
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME, done;
    RowList list;
    list.rows = Rows::strided(addr, 0, 1, n);
    list.stop = stop_;
    list.book = !(launch_ && launch_->fetched(addr, n, &done));
    tlm::tlm_response_status status = tlm::TLM_OK_RESPONSE;
    const bool ok = tlm_access_rows(mem, tlm::TLM_READ_COMMAND, list, static_cast<uint8_t*>(dst), delay, &status);
    fault_code_ = memory_error(status, fault_code_);  // the code itself is lost
    if (list.book) {
      done = sc_core::sc_time_stamp() + delay;
      if (launch_) launch_->note_fetch(addr, n, done);
    }
    if (done > sc_core::sc_time_stamp()) wait(done - sc_core::sc_time_stamp());
    stats_.stall[static_cast<int>(Stall::kMemory)] += now() - before;
    return ok;
  };
  hw::ProgramHeader h{};
  if (!fetch(program_, &h, sizeof h)) return fault(0);
  // The whole entry table, the same bytes for every rank.
  std::vector<uint32_t> entries(h.num_entries);
  if (rank_ >= h.num_entries || !fetch(program_ + sizeof h, entries.data(), 4ull * h.num_entries)) return fault(0);
  const uint32_t entry = entries[rank_];
  if (args_block_.from_host) {  // the firmware read them over PCIe
    args_.assign(args_block_.values, args_block_.values + num_args_);
  } else {
    args_.assign(num_args_, 0);
    if (num_args_ > 0 && !fetch(args_block_.addr, args_.data(), num_args_ * 8ull)) return fault(0);
  }
  if (entry >= h.num_instrs) return fault(entry);
  code_.resize(h.num_instrs);
  if (!fetch(program_ + h.instr_offset, code_.data(), code_.size() * sizeof(hw::Instr))) return fault(entry);
  code_ready_ = sc_core::sc_time_stamp() + local_;
  std::fill(std::begin(regs_), std::end(regs_), 0);
  std::fill(std::begin(tag_done_), std::end(tag_done_), sc_core::SC_ZERO_TIME);
  std::fill(std::begin(tag_ring_), std::end(tag_ring_), false);
  pt_.clear();  // a faulted program's MATMULs are abandoned
  pt_free_ = 0;
  uint32_t pc = entry;
  // The firmware's watchdog: a program still running `watchdog_cycles` after its launch began is
  // stopped, whatever its own time went to (its instructions, or waits on memory or tags; a wait
  // at a barrier is the late core's): the check comes before each instruction and at END, so a
  // short program of long waits is caught too. Every 256 instructions, a core that has run ahead
  // on its own for a host quantum hands control back to SystemC, so that a long stretch of scalar
  // or compute instructions cannot keep the simulator from answering the host.
  const uint64_t budget = config_.firmware.watchdog_cycles;
  uint64_t deadline = budget == 0 ? UINT64_MAX : launched_ + budget;
  const sc_core::sc_time quantum(static_cast<double>(config_.sim.host_quantum_ns), sc_core::SC_NS);
  uint32_t since_look = 0;
  ++programs_run_;
  if (hang_in_ != 0 && programs_run_ == hang_in_) return hang(entry, deadline, quantum);
  while (pc < code_.size()) {
    const hw::Instr& in = code_[pc];
    const uint64_t before = now();
    if (before > deadline) return {hw::ErrorCode::kWatchdog, hw::Field::kNone, id_ << 24 | (pc & 0xffffff)};
    if (pc == break_pc_) return breakpoint(pc);  // END included: a core's final state
    if (in.op == hw::Op::kEnd) {                 // the program ends when its last MATMUL has
      pt_wait({}, true);
      stats_.stall[static_cast<int>(Stall::kCompute)] += now() - before;
      return {};
    }
    if (++since_look == 256) {
      since_look = 0;
      if (local_ >= quantum) sync();
    }
    const uint32_t at = pc++;
    at_ = at;
    stall_ = Stall::kIssue;
    issue_ = 0;
    pt_waited_ = 0;
    const bool ok = execute(in, pc);
    account(before);
    if (!ok) return fault(at);
    // Time at a barrier is the late core's to answer for: the watchdog stops that one.
    if (stall_ == Stall::kSync && budget != 0) deadline += now() - before;
  }
  return fault(pc);  // ran off the end without END
}

hw::Verdict Core::breakpoint(uint32_t pc) {
  const std::optional<Breakpoint>& armed = launch_->brk();
  if (!armed) return fault(pc);
  const Breakpoint& b = *armed;
  pt_wait({}, true);
  sync();
  settle(lx_.get(), lx_bytes_, false);  // the arithmetic and loads posted before it have landed
  std::vector<uint8_t> dump(std::min<uint64_t>(b.size, hw::kBreakHeaderBytes + lx_bytes_));
  static_assert(sizeof regs_ == hw::kBreakHeaderBytes, "the dump starts with the registers");
  std::memcpy(dump.data(), regs_, sizeof regs_);
  std::memcpy(dump.data() + sizeof regs_, lx_.get(), dump.size() - sizeof regs_);
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  tlm::tlm_response_status status = tlm::TLM_OK_RESPONSE;
  if (!in_window(b.buffer, dump.size())) return fault(pc);
  if (!tlm_access(mem, tlm::TLM_WRITE_COMMAND, b.buffer, dump.data(), dump.size(), delay, stop_, &status)) {
    fault_code_ = memory_error(status, fault_code_);
    return fault(pc);
  }
  wait(delay);
  if (sanitizer_) {
    sanitizer_->set_report(id_, {hw::SanitizeReport::kBreakpoint, false, b.buffer, dump.size(), pc, 0});
  }
  fault_code_ = hw::ErrorCode::kSanitizerReport;
  return fault(pc);
}

hw::Verdict Core::hang(uint32_t pc, uint64_t deadline, const sc_core::sc_time& quantum) {
  // Injected: the core stops making progress at its first instruction, as a core stuck on a bus
  // or in a livelock would. Only the watchdog gets it out; with the watchdog off, never.
  for (;;) {
    wait(quantum);
    if (now() > deadline) return {hw::ErrorCode::kWatchdog, hw::Field::kNone, id_ << 24 | (pc & 0xffffff)};
  }
}

bool Core::in_window(uint64_t addr, uint64_t n) {
  if (window_size_ == 0 || hw::in_window(addr, n, window_base_, window_size_)) return true;
  fault_code_ = hw::ErrorCode::kDmaFault;
  return false;
}

uint8_t* Core::lx(const hw::Instr& in, uint64_t addr, uint64_t n) {
  const uint64_t at = addr + regs_[hw::reg_rl(in.regs)];
  return at < addr ? nullptr : scratchpad(at, n);
}

uint8_t* Core::scratchpad(uint64_t addr, uint64_t n) {
  if (addr > lx_bytes_ || n > lx_bytes_ - addr) return nullptr;
  return lx_.get() + addr;
}

void Core::timed(uint64_t begin, uint64_t cycles, const char* name, uint64_t elements, const hw::Instr& in) {
  stall_ = Stall::kCompute;
  issue_ = functional_ ? 1 : config_.chip.issue_cycles;
  local_ += clock_.cycles(functional_ ? 1 : config_.chip.issue_cycles + cycles);
  if (trace_.instructions()) trace_compute(track_, begin, now(), name, elements, in);
}

void Core::pt_wait_until(uint64_t cycle) {
  const uint64_t at = now();
  if (cycle <= at) return;
  local_ += clock_.cycles(cycle - at);
  pt_waited_ += cycle - at;
}

void Core::pt_wait(std::initializer_list<Touch> touches, bool all) {
  if (pt_.empty()) return;
  const uint64_t at = now();
  uint64_t need = 0;
  for (const PtOp& op : pt_) {
    if (op.end <= at) continue;
    bool hit = all;
    for (const Touch& t : touches) {
      if (!t.p || t.n == 0) continue;
      hit = hit || overlaps(t.p, t.n, op.c.p, op.c.n) ||
            (t.write && (overlaps(t.p, t.n, op.a.p, op.a.n) || overlaps(t.p, t.n, op.b.p, op.b.n)));
    }
    if (hit) need = op.end;  // in end order: the last hit is the latest
  }
  pt_wait_until(need);
  const uint64_t after = now();
  pt_.erase(std::remove_if(pt_.begin(), pt_.end(), [&](const PtOp& op) { return op.end <= after; }), pt_.end());
}

void Core::pt_keep(uint32_t latest) {
  pt_wait({});  // forgets the finished ones: those left are running, in end order
  if (pt_.size() > latest) pt_wait_until(pt_[pt_.size() - latest - 1].end);
  pt_wait({});
}

void Core::trace_compute(uint32_t track, uint64_t begin, uint64_t end, const char* name, uint64_t elements,
                         const hw::Instr& in) {
  // The operands as the core resolved them: scratchpad addresses with r[rl] added.
  const uint64_t base = regs_[hw::reg_rl(in.regs)];
  const uint64_t dst = in.a + base, src = (in.b & 0xffffffffu) + base, src1 = (in.b >> 32) + base;
  if (in.op == hw::Op::kMatmul) {  // C (dst) = A (src) @ B (src1), M x K @ K x N
    trace_.slice(track, name, begin, end,
                 {{"instruction", at_},
                  {"dst", dst},
                  {"src", src},
                  {"src1", src1},
                  {"m", hw::unpack_m(in.c)},
                  {"k", hw::unpack_k(in.c)},
                  {"n", hw::unpack_n(in.c)}});
  } else if (in.op == hw::Op::kBinary || in.op == hw::Op::kFma || in.op == hw::Op::kSelect) {
    trace_.slice(track, name, begin, end,
                 {{"elements", elements},
                  {"instruction", at_},
                  {"dst", dst},
                  {"src", src},
                  {"src1", src1},
                  {"rows", in.d},
                  {"cols", in.e}});
  } else {
    trace_.slice(
        track, name, begin, end,
        {{"elements", elements}, {"instruction", at_}, {"dst", dst}, {"src", src}, {"rows", in.d}, {"cols", in.e}});
  }
}

void Core::account(uint64_t before) {
  const uint64_t total = now() - before, waited = std::min(pt_waited_, total);
  stats_.stall[static_cast<int>(Stall::kCompute)] += waited;
  const uint64_t elapsed = total - waited;
  const uint64_t issue = stall_ == Stall::kIssue ? elapsed : std::min(elapsed, issue_);
  stats_.stall[static_cast<int>(Stall::kIssue)] += issue;
  stats_.stall[static_cast<int>(stall_)] += elapsed - issue;
}

namespace {

// The flag bits each opcode defines; any other set bit is a fault.
uint8_t allowed_flags(hw::Op op) {
  switch (op) {
    case hw::Op::kBranch:
      return 0x07;  // hw::Cond
    case hw::Op::kLoad:
    case hw::Op::kStore:
    case hw::Op::kGather:
    case hw::Op::kLoadMulticast:
      return hw::kDmaAsync | 0xf0;
    case hw::Op::kScatter:
      return hw::kDmaAsync | hw::kScatterAdd | hw::kScatterMul | hw::kScatterMax | 0xf0;
    case hw::Op::kMatmul:
      return hw::kMatmulAccumulate;
    case hw::Op::kBarrier:
      return hw::kBarrierKeepMask;
    case hw::Op::kUnary:
      return 0x07;  // Bcast of src
    case hw::Op::kBinary:
    case hw::Op::kSelect:
      return 0x3f;  // two Bcast fields
    case hw::Op::kReduce:
    case hw::Op::kScan:
      return hw::kReduceAccumulate;
    case hw::Op::kRandom:
      return 1;  // normal
    case hw::Op::kSort:
      return hw::kSortDescending;
    default:
      return 0;
  }
}

// Functions defined only for float or only for integer types (the compiler never mixes them).
bool type_ok(const hw::Instr& in) {
  const bool is_float = hw::dtype_is_float(in.dtype);
  if (in.op == hw::Op::kRandom) return is_float;
  if (in.op == hw::Op::kUnary) {
    const auto f = static_cast<hw::UnaryFn>(in.c);
    if (f == hw::UnaryFn::kBitwiseNot) return !is_float;
    if (latency::unary_is_transcendental(f)) return is_float;
  }
  if (in.op == hw::Op::kBinary) {
    const auto f = static_cast<hw::BinaryFn>(in.c & 0xff);
    if (f == hw::BinaryFn::kBitAnd || f == hw::BinaryFn::kBitOr || f == hw::BinaryFn::kBitXor) return !is_float;
    if (f == hw::BinaryFn::kAtan2) return is_float;
  }
  return true;
}

}  // namespace

bool Core::execute(const hw::Instr& in, uint32_t& pc) {
  ++stats_.instructions;
  if ((in.flags & ~allowed_flags(in.op)) != 0 || !type_ok(in)) return false;
  const uint64_t begin = now();
  uint64_t* r = regs_;
  const auto reg_ok = [](uint32_t i) { return i > 0 && i < hw::kNumRegs; };  // r0 is read-only zero
  switch (in.op) {
    case hw::Op::kLi:
    case hw::Op::kArg:
    case hw::Op::kAddi:
    case hw::Op::kAdd:
    case hw::Op::kMuli:
    case hw::Op::kMul:
    case hw::Op::kDivu:
    case hw::Op::kRemu:
    case hw::Op::kRank: {
      if (!reg_ok(in.a) || in.d >= hw::kNumRegs || in.e >= hw::kNumRegs) return false;
      if (in.op == hw::Op::kLi) r[in.a] = in.b;
      if (in.op == hw::Op::kArg) {
        if (in.b >= num_args_) return false;
        r[in.a] = args_[in.b];
      }
      if (in.op == hw::Op::kAddi) r[in.a] = r[in.d] + in.b;
      if (in.op == hw::Op::kAdd) r[in.a] = r[in.d] + r[in.e];
      if (in.op == hw::Op::kMuli) r[in.a] = r[in.d] * in.b;
      if (in.op == hw::Op::kMul) r[in.a] = r[in.d] * r[in.e];
      if ((in.op == hw::Op::kDivu || in.op == hw::Op::kRemu) && in.b == 0) return false;
      if (in.op == hw::Op::kDivu) r[in.a] = r[in.d] / in.b;
      if (in.op == hw::Op::kRemu) r[in.a] = r[in.d] % in.b;
      if (in.op == hw::Op::kRank) {
        if (!reg_ok(in.a + 1)) return false;
        r[in.a] = rank_;
        r[in.a + 1] = launch_ ? launch_->size() : 1;
      }
      local_ += clock_.cycles(functional_ ? 1 : config_.chip.scalar_cycles);
      return true;
    }
    case hw::Op::kBranch: {
      if (in.d >= hw::kNumRegs || in.e >= hw::kNumRegs || in.a >= code_.size()) return false;
      const uint64_t x = r[in.d], y = r[in.e];
      bool taken = false;
      switch (static_cast<hw::Cond>(in.flags)) {
        case hw::Cond::kAlways:
          taken = true;
          break;
        case hw::Cond::kEq:
          taken = x == y;
          break;
        case hw::Cond::kNe:
          taken = x != y;
          break;
        case hw::Cond::kLtu:
          taken = x < y;
          break;
        case hw::Cond::kGeu:
          taken = x >= y;
          break;
        case hw::Cond::kLt:
          taken = static_cast<int64_t>(x) < static_cast<int64_t>(y);
          break;
        case hw::Cond::kGe:
          taken = static_cast<int64_t>(x) >= static_cast<int64_t>(y);
          break;
        default:
          return false;
      }
      if (taken) pc = in.a;
      local_ += clock_.cycles(functional_ ? 1 : config_.chip.scalar_cycles);
      return true;
    }
    case hw::Op::kPrint:
      return print(in);
    case hw::Op::kBarrier: {
      if (!launch_) return false;
      pt_keep(hw::barrier_keep(in.flags));  // the other cores may read what the PT arrays write
      sync();
      launch_->arrive();
      stall_ = Stall::kSync;
      if (trace_.instructions()) trace_.slice(track_, "barrier", begin, now(), {{"instruction", at_}});
      return true;
    }
    case hw::Op::kLoad:
    case hw::Op::kStore:
      return dma(in);
    case hw::Op::kGather:
    case hw::Op::kScatter:
      return indirect(in);
    case hw::Op::kLoadMulticast:
      return multicast(in);
    case hw::Op::kWait: {
      if (in.a >> hw::kNumDmaTags) return false;
      // The tags are this core's own: waiting for them is local time too.
      issue_ = functional_ ? 1 : config_.chip.issue_cycles;
      stall_ = Stall::kMemory;
      sc_core::sc_time until = sc_core::sc_time_stamp() + local_ + clock_.cycles(issue_);
      for (uint32_t t = 0; t < hw::kNumDmaTags; ++t) {
        if (!(in.a >> t & 1) || tag_done_[t] <= until) continue;
        until = tag_done_[t];
        stall_ = tag_ring_[t] ? Stall::kRing : Stall::kMemory;  // what held up the transfer waited for
      }
      local_ = until - sc_core::sc_time_stamp();
      const uint64_t end = now();
      if (trace_.instructions() && end - begin > config_.chip.issue_cycles) {
        trace_.slice(track_, "wait", begin, end, {{"tags", in.a}, {"instruction", at_}});
      }
      return true;
    }
    case hw::Op::kMatmul: {
      const uint32_t m = hw::unpack_m(in.c), k = hw::unpack_k(in.c), n = hw::unpack_n(in.c);
      if (!hw::dtype_is_float(in.dtype) || m == 0 || k == 0 || n == 0) return false;
      const uint64_t es = hw::dtype_size(in.dtype);
      uint8_t* c = lx(in, in.a, uint64_t{m} * n * 4);
      if (c && (c - lx_.get()) % 4 != 0) return false;  // the fp32 accumulator is word aligned
      const uint8_t* a = lx(in, static_cast<uint32_t>(in.b), uint64_t{m} * k * es);
      const uint8_t* b = lx(in, in.b >> 32, uint64_t{k} * n * es);
      if (!a || !b || !c) return false;
      const hw::DType t = in.dtype;
      const bool acc = in.flags & hw::kMatmulAccumulate;
      if (!timing_) {  // a product of floats decides no address
        compute([=] { tile_matmul(reinterpret_cast<float*>(c), a, b, m, k, n, t, acc); },
                {{a, uint64_t{m} * k * es, false}, {b, uint64_t{k} * n * es, false}, {c, uint64_t{m} * n * 4, true}});
      }
      stats_.flops += 2ull * m * k * n;
      const uint64_t cycles = latency::matmul(config_.chip, m, k, n, in.dtype);
      const uint32_t depth = config_.chip.pt_queue_depth;
      if (functional_ || depth == 0) {
        timed(begin, cycles, "matmul", uint64_t{m} * n, in);
        return true;
      }
      // To the PT arrays: wait for room among the MATMULs they hold, then issue on.
      pt_wait({});  // forgets the finished ones
      if (pt_.size() >= depth) pt_wait_until(pt_[pt_.size() - depth].end);
      issue_ = config_.chip.issue_cycles;
      local_ += clock_.cycles(issue_);
      const uint64_t start = std::max(now(), pt_free_);
      pt_free_ = start + cycles;
      pt_.push_back({pt_free_,
                     {a, uint64_t{m} * k * es, false},
                     {b, uint64_t{k} * n * es, false},
                     {c, uint64_t{m} * n * 4, true}});
      if (trace_.instructions()) {
        if (pt_track_ == UINT32_MAX) pt_track_ = trace_.track(card_, fmt::format("core {:02} PT", id_));
        trace_compute(pt_track_, start, pt_free_, "matmul", uint64_t{m} * n, in);
      }
      return true;
    }
    default:
      return sfp(in);
  }
}

}  // namespace spyre::sim
