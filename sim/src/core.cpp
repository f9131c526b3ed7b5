#include "core.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "spyre/hw/commands.h"
#include "tile_math.h"

namespace spyre::sim {

namespace {
uint64_t round_up(uint64_t v, uint64_t m) {
  return (v + m - 1) / m * m;
}
}  // namespace

Ring make_ring(const Config& c) {
  const double bytes_per_ns = c.ring.bytes_per_cycle * (c.chip.clock_mhz / 1000.0);
  const sc_core::sc_time latency = Clock(c.chip.clock_mhz).cycles(c.ring.latency_cycles);
  return Ring{BandwidthServer(bytes_per_ns, sc_core::SC_ZERO_TIME),
              BandwidthServer(bytes_per_ns, sc_core::SC_ZERO_TIME), latency};
}

Core::Core(const sc_core::sc_module_name& name, uint32_t card, uint32_t id, const Config& config, Ring& ring,
           Trace& trace, CoreStats& stats)
    : sc_core::sc_module(name),
      mem("mem"),
      config_(config),
      id_(id),
      clock_(config.chip.clock_mhz),
      ring_(ring),
      trace_(trace),
      stats_(stats),
      track_(trace.track(card, fmt::format("core {:02}", id))) {
  sc_core::sc_spawn_options opts;
  opts.set_stack_size(1 << 20);
  sc_core::sc_spawn([this] { thread(); }, "exec", &opts);
}

void Core::start(uint64_t program, uint64_t args, uint64_t args_size, uint32_t rank) {
  program_ = program;
  args_addr_ = args;
  num_args_ = static_cast<uint32_t>(std::min<uint64_t>(args_size / 8, hw::kMaxLaunchArgs));
  rank_ = rank;
  busy_ = true;
  start_.notify(sc_core::SC_ZERO_TIME);
}

uint64_t Core::matmul_cycles(uint32_t m, uint32_t k, uint32_t n, hw::DType t) const {
  const ChipConfig& c = config_.chip;
  // Rows map onto PT rows, columns onto PT columns of every corelet, K onto the SIMD lanes.
  const uint64_t per_cycle = uint64_t{c.pt_rows} * c.pt_cols * c.pt_simd * c.corelets_per_core;
  const uint64_t work =
      round_up(m, c.pt_rows) * round_up(n, uint64_t{c.pt_cols} * c.corelets_per_core) * round_up(k, c.pt_simd);
  const double rate = t == hw::DType::kF32 ? c.fp32_rate : 1.0;
  return static_cast<uint64_t>(static_cast<double>(work) / (static_cast<double>(per_cycle) * rate) + 0.999999) +
         c.pt_fill_cycles;
}

void Core::thread() {
  for (;;) {
    wait(start_);
    if (lx_.empty()) lx_.assign(config_.chip.lx_bytes, 0);
    const uint64_t begin = clock_.now_cycles();
    result_ = run();
    const uint64_t end = clock_.now_cycles();
    ++stats_.programs;
    stats_.busy_cycles += end - begin;
    trace_.slice(track_, result_.ok() ? "program" : "program (fault)", begin, end,
                 {{"rank", rank_}, {"program", program_}});
    busy_ = false;
    done_.notify(sc_core::SC_ZERO_TIME);
  }
}

fw::Verdict Core::run() {
  // The firmware checked the header against the launch; the core checks what it executes.
  hw::ProgramHeader h{};
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  if (!tlm_access(mem, tlm::TLM_READ_COMMAND, program_, reinterpret_cast<uint8_t*>(&h), sizeof h, delay))
    return fault(0);
  uint32_t entry = 0;
  if (rank_ >= h.num_entries || !tlm_access(mem, tlm::TLM_READ_COMMAND, program_ + sizeof h + 4ull * rank_,
                                            reinterpret_cast<uint8_t*>(&entry), 4, delay)) {
    return fault(0);
  }
  args_.assign(num_args_, 0);
  if (num_args_ > 0 && !tlm_access(mem, tlm::TLM_READ_COMMAND, args_addr_, reinterpret_cast<uint8_t*>(args_.data()),
                                   num_args_ * 8ull, delay)) {
    return fault(0);
  }
  if (entry >= h.num_instrs) return fault(entry);
  std::vector<hw::Instr> code(h.num_instrs - entry);
  if (!tlm_access(mem, tlm::TLM_READ_COMMAND, program_ + h.instr_offset + uint64_t{entry} * sizeof(hw::Instr),
                  reinterpret_cast<uint8_t*>(code.data()), code.size() * sizeof(hw::Instr), delay)) {
    return fault(entry);
  }
  wait(delay);
  for (uint32_t i = 0; i < code.size(); ++i) {
    if (code[i].op == hw::Op::kEnd) return {};
    const fw::Verdict v = execute(code[i], entry + i);
    if (!v.ok()) return v;
  }
  return fault(h.num_instrs);  // ran off the end without kEnd
}

fw::Verdict Core::execute(const hw::Instr& in, uint32_t pc) {
  ++stats_.instructions;
  const uint64_t begin = clock_.now_cycles();
  const sc_core::sc_time issue = clock_.cycles(config_.chip.issue_cycles);
  switch (in.op) {
    case hw::Op::kLoad:
    case hw::Op::kStore: {
      const bool load = in.op == hw::Op::kLoad;
      const uint64_t rows = in.d;
      const uint64_t row_bytes = in.e;
      const uint64_t total = rows * row_bytes;
      if (in.arg >= num_args_ || rows == 0 || row_bytes == 0 || !lx_range(in.a, total)) return fault(pc);
      // Address arithmetic that wraps around would land somewhere valid: fault instead.
      uint64_t base = 0, span = 0, last = 0;
      if (__builtin_add_overflow(args_[in.arg], in.b, &base) || __builtin_mul_overflow(rows - 1, in.c, &span) ||
          __builtin_add_overflow(base, span, &last) || __builtin_add_overflow(last, row_bytes, &last)) {
        return fault(pc);
      }
      // Rows are issued back to back: memory bandwidth spaces them, its latency is paid once.
      sc_core::sc_time mem_delay = issue;
      for (uint64_t r = 0; r < rows; ++r) {
        uint8_t* lx = lx_.data() + in.a + r * row_bytes;
        sc_core::sc_time row_delay = issue;
        if (!tlm_access(mem, load ? tlm::TLM_READ_COMMAND : tlm::TLM_WRITE_COMMAND, base + r * in.c, lx, row_bytes,
                        row_delay)) {
          return fault(pc);
        }
        mem_delay = std::max(mem_delay, row_delay);
      }
      BandwidthServer& link = load ? ring_.to_cores : ring_.from_cores;
      const sc_core::sc_time now = sc_core::sc_time_stamp();
      const sc_core::sc_time ring_done = link.reserve(now + issue, total) + ring_.latency;
      wait(std::max(now + mem_delay, ring_done) - now);
      (load ? stats_.bytes_loaded : stats_.bytes_stored) += total;
      const uint64_t end = clock_.now_cycles();
      stats_.memory_cycles += end - begin;
      if (trace_.instructions()) trace_.slice(track_, load ? "load" : "store", begin, end, {{"bytes", total}});
      return {};
    }
    case hw::Op::kMatmul: {
      const uint32_t m = hw::unpack_m(in.c), k = hw::unpack_k(in.c), n = hw::unpack_n(in.c);
      const uint32_t a = static_cast<uint32_t>(in.b), b = static_cast<uint32_t>(in.b >> 32);
      if (in.dtype >= hw::DType::kCount || m == 0 || k == 0 || n == 0) return fault(pc);
      const uint64_t es = hw::dtype_size(in.dtype);
      if (!lx_range(a, uint64_t{m} * k * es) || !lx_range(b, uint64_t{k} * n * es) ||
          !lx_range(in.a, uint64_t{m} * n * 4) || in.a % 4 != 0) {
        return fault(pc);
      }
      tile_matmul(reinterpret_cast<float*>(lx_.data() + in.a), lx_.data() + a, lx_.data() + b, m, k, n, in.dtype,
                  in.flags & hw::kMatmulAccumulate);
      wait(issue + clock_.cycles(matmul_cycles(m, k, n, in.dtype)));
      stats_.flops += 2ull * m * k * n;
      const uint64_t end = clock_.now_cycles();
      stats_.compute_cycles += end - begin;
      if (trace_.instructions()) trace_.slice(track_, "matmul", begin, end, {{"m", m}, {"k", k}, {"n", n}});
      return {};
    }
    case hw::Op::kConvert: {
      const auto from = static_cast<hw::DType>(in.e);
      if (in.dtype >= hw::DType::kCount || from >= hw::DType::kCount) return fault(pc);
      const uint64_t count = in.d;
      if (!lx_range(in.a, count * hw::dtype_size(in.dtype)) || !lx_range(in.b, count * hw::dtype_size(from))) {
        return fault(pc);
      }
      tile_convert(lx_.data() + in.a, in.dtype, lx_.data() + in.b, from, count);
      const uint64_t cycles =
          (count + config_.chip.sfp_lanes - 1) / config_.chip.sfp_lanes + config_.chip.sfp_fill_cycles;
      wait(issue + clock_.cycles(cycles));
      const uint64_t end = clock_.now_cycles();
      stats_.compute_cycles += end - begin;
      if (trace_.instructions()) trace_.slice(track_, "convert", begin, end, {{"elements", count}});
      return {};
    }
    default:
      return fault(pc);
  }
}

}  // namespace spyre::sim
