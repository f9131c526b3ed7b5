// A core's SFP instructions: operands checked against the scratchpad, the arithmetic handed to the
// SFP model (sfp.h), the time from latency.h.
#include "core.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "latency.h"
#include "sfp.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/regs.h"
#include "tile_math.h"

namespace spyre::sim {

namespace {

// Whether an SFP instruction's result may become the index of a GATHER or SCATTER: a result of an
// integer or bool type (a CONVERT's is its destination type), a mask, an arg-reduction's or a
// sort's positions. Timing mode computes only these: they cost little, and where their inputs were
// not computed they still land in range (an argmax over any floats is a valid position), so no
// index faults that the timed run would not. A replay takes the indices themselves from the tape.
bool may_index(const hw::Instr& in) {
  if (!hw::dtype_is_float(in.dtype)) return true;
  switch (in.op) {
    case hw::Op::kUnary:
      return hw::unary_is_bool(static_cast<hw::UnaryFn>(in.c));
    case hw::Op::kBinary:
      return hw::binary_is_compare(static_cast<hw::BinaryFn>(in.c & 0xff));
    case hw::Op::kReduce: {
      const auto f = static_cast<hw::ReduceFn>(in.c & 0xff);
      return f == hw::ReduceFn::kArgMax || f == hw::ReduceFn::kArgMin;
    }
    case hw::Op::kSort:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool Core::sfp(const hw::Instr& in) {
  using hw::Bcast;
  const uint64_t begin = now();
  const uint64_t rows = in.d, cols = in.e, n = rows * cols;
  const hw::DType t = in.dtype;
  if (t >= hw::DType::kCount) return false;
  // Every SFP instruction touches a tile of n elements in the scratchpad: a larger n is malformed,
  // and checking it first keeps the byte counts below (n * element size) from wrapping.
  if (n > lx_bytes_) return false;
  const uint64_t es = hw::dtype_size(t);
  const auto lo = [](uint64_t v) { return static_cast<uint32_t>(v); };
  const auto hi = [](uint64_t v) { return static_cast<uint32_t>(v >> 32); };
  // An operand with broadcast `b` at scratchpad `addr`, or nullptr for an immediate.
  bool bad = false;
  const auto operand = [&](uint64_t addr, Bcast b) -> const uint8_t* {
    if (b >= Bcast::kCount) {
      bad = true;
      return nullptr;
    }
    if (b == Bcast::kImm) return nullptr;
    const uint8_t* p = lx(in, addr, hw::bcast_elements(b, rows, cols) * es);
    bad |= p == nullptr;
    return p;
  };
  const auto span = [&](Bcast b) { return b == Bcast::kImm ? 0 : hw::bcast_elements(b, rows, cols) * es; };
  const char* name = "";
  // The arithmetic, unless timing mode leaves it out (the checks and the time stay).
  const bool arithmetic = !timing_ || (values_ && may_index(in));
  const auto run = [&](std::function<void()> task, std::initializer_list<Touch> touches) {
    pt_wait(touches);
    if (arithmetic) compute(std::move(task), touches);
  };
  switch (in.op) {
    case hw::Op::kConvert: {
      const auto from = static_cast<hw::DType>(in.c);
      if (from >= hw::DType::kCount) return false;
      uint8_t* dst = lx(in, in.a, n * es);
      const uint8_t* src = lx(in, in.b, n * hw::dtype_size(from));
      if (!dst || !src) return false;
      run([=] { sfp_convert(dst, t, src, from, n); }, {{dst, n * es, true}, {src, n * hw::dtype_size(from), false}});
      name = "convert";
      break;
    }
    case hw::Op::kUnary: {
      const auto f = static_cast<hw::UnaryFn>(in.c);
      if (in.c >= static_cast<uint64_t>(hw::UnaryFn::kCount)) return false;
      const auto b = static_cast<Bcast>(in.flags);
      uint8_t* dst = lx(in, in.a, n * (hw::unary_is_bool(f) ? 1 : es));
      const uint8_t* src = operand(in.b, b);
      if (bad || !dst || b == Bcast::kImm) return false;
      run([=] { sfp_unary(f, t, dst, src, b, rows, cols); },
          {{dst, n * (hw::unary_is_bool(f) ? 1 : es), true}, {src, span(b), false}});
      name = "unary";
      break;
    }
    case hw::Op::kBinary: {
      const auto f = static_cast<hw::BinaryFn>(in.c & 0xff);
      if ((in.c & 0xff) >= static_cast<uint64_t>(hw::BinaryFn::kCount) || (in.c >> 8 & 0xffffff) != 0) return false;
      const uint8_t* s0 = operand(lo(in.b), hw::bcast_src0(in.flags));
      const uint8_t* s1 = operand(hi(in.b), hw::bcast_src1(in.flags));
      uint8_t* dst = lx(in, in.a, n * (hw::binary_is_compare(f) ? 1 : es));
      if (bad || !dst) return false;
      const Bcast b0 = hw::bcast_src0(in.flags), b1 = hw::bcast_src1(in.flags);
      const uint32_t imm = hi(in.c);
      run([=] { sfp_binary(f, t, dst, s0, b0, s1, b1, imm, rows, cols); },
          {{dst, n * (hw::binary_is_compare(f) ? 1 : es), true}, {s0, span(b0), false}, {s1, span(b1), false}});
      name = "binary";
      break;
    }
    case hw::Op::kSelect: {
      const uint8_t* mask = lx(in, lo(in.b), n);
      const uint8_t* s1 = operand(hi(in.b), hw::bcast_src0(in.flags));
      const uint8_t* s2 = operand(lo(in.c), hw::bcast_src1(in.flags));
      uint8_t* dst = lx(in, in.a, n * es);
      if (bad || !mask || !dst) return false;
      const Bcast b1 = hw::bcast_src0(in.flags), b2 = hw::bcast_src1(in.flags);
      const uint32_t imm = hi(in.c);
      run([=] { sfp_select(t, dst, mask, s1, b1, s2, b2, imm, rows, cols); },
          {{dst, n * es, true}, {mask, n, false}, {s1, span(b1), false}, {s2, span(b2), false}});
      name = "select";
      break;
    }
    case hw::Op::kFma: {
      const uint8_t* s0 = lx(in, lo(in.b), n * es);
      const uint8_t* s1 = lx(in, hi(in.b), n * es);
      const uint8_t* s2 = lx(in, lo(in.c), n * es);
      uint8_t* dst = lx(in, in.a, n * es);
      if (!s0 || !s1 || !s2 || !dst) return false;
      run([=] { sfp_fma(t, dst, s0, s1, s2, n); },
          {{dst, n * es, true}, {s0, n * es, false}, {s1, n * es, false}, {s2, n * es, false}});
      name = "fma";
      break;
    }
    case hw::Op::kReduce: {
      const auto f = static_cast<hw::ReduceFn>(in.c & 0xff);
      if ((in.c & 0xff) >= static_cast<uint64_t>(hw::ReduceFn::kCount) || (in.c >> 8 & 0xffffff) != 0 || cols == 0) {
        return false;
      }
      const bool arg = f == hw::ReduceFn::kArgMax || f == hw::ReduceFn::kArgMin;
      uint8_t* dst = lx(in, in.a, rows * (arg ? 8 : es));
      const uint8_t* src = lx(in, in.b, n * es);
      uint8_t* best = arg ? lx(in, hi(in.c), rows * es) : nullptr;
      if (!dst || !src || (arg && !best) || (!arg && hi(in.c) != 0)) return false;
      const bool acc = in.flags & hw::kReduceAccumulate;
      const auto base = static_cast<int64_t>(regs_[hw::reg_rd(in.regs)]);
      run([=] { sfp_reduce(f, t, dst, src, rows, cols, acc, best, base); },
          {{dst, rows * (arg ? 8 : es), true}, {src, n * es, false}, {best, arg ? rows * es : 0, true}});
      name = "reduce";
      break;
    }
    case hw::Op::kFill:
    case hw::Op::kIota: {
      uint8_t* dst = lx(in, in.a, n * es);
      if (!dst) return false;
      double x, y;
      std::memcpy(&x, &in.b, 8);
      std::memcpy(&y, &in.c, 8);
      if (in.op == hw::Op::kFill) {
        const uint64_t bits = in.c;
        run([=] { sfp_fill(t, dst, bits, n); }, {{dst, n * es, true}});
      } else {  // element i is start + (r[rd] + i) * step: a block of a longer sequence
        const double start = x + static_cast<double>(static_cast<int64_t>(regs_[hw::reg_rd(in.regs)])) * y;
        run([=] { sfp_iota(t, dst, start, y, n); }, {{dst, n * es, true}});
      }
      name = in.op == hw::Op::kFill ? "fill" : "iota";
      break;
    }
    case hw::Op::kScan: {
      if ((in.c & 0xff) >= static_cast<uint64_t>(hw::ScanFn::kCount) || (in.c >> 8 & 0xffffff) != 0 ||
          t == hw::DType::kBool) {
        return false;
      }
      uint8_t* dst = lx(in, in.a, n * es);
      const uint8_t* src = lx(in, in.b, n * es);
      uint8_t* carry = hi(in.c) ? lx(in, hi(in.c), rows * es) : nullptr;
      if (!dst || !src || (hi(in.c) && !carry) || ((in.flags & hw::kReduceAccumulate) && !carry)) return false;
      const auto f = static_cast<hw::ScanFn>(in.c & 0xff);
      const bool acc = in.flags & hw::kReduceAccumulate;
      run([=] { sfp_scan(f, t, dst, src, rows, cols, carry, acc); },
          {{dst, n * es, true}, {src, n * es, false}, {carry, carry ? rows * es : 0, true}});
      name = "scan";
      break;
    }
    case hw::Op::kRandom: {
      const uint32_t rd = hw::reg_rd(in.regs);
      uint8_t* dst = lx(in, in.a, n * es);
      if (!dst || !hw::dtype_is_float(t) || rd + 1 >= hw::kNumRegs) return false;
      const uint64_t key = regs_[rd], counter = regs_[rd + 1];
      const bool normal = in.flags & 1;
      run([=] { sfp_random(t, dst, key, counter, n, normal); }, {{dst, n * es, true}});
      name = "random";
      break;
    }
    case hw::Op::kSort: {
      uint8_t* dst = lx(in, in.a, n * es);
      const uint8_t* src = lx(in, in.b, n * es);
      uint8_t* index = lx(in, in.c, n * 8);
      const bool partly = dst != src && overlaps(dst, n * es, src, n * es);  // rows read after written
      if (!dst || !src || !index || in.c >> 32 || (index - lx_.get()) % 8 != 0 || cols == 0 ||
          overlaps(index, n * 8, dst, n * es) || overlaps(index, n * 8, src, n * es) || partly) {
        return false;
      }
      const bool descending = in.flags & hw::kSortDescending;
      run([=] { sfp_sort(t, dst, reinterpret_cast<int64_t*>(index), src, rows, cols, descending); },
          {{dst, n * es, true}, {src, n * es, false}, {index, n * 8, true}});
      name = "sort";
      break;
    }
    case hw::Op::kTranspose: {
      uint8_t* dst = lx(in, in.a, n * es);
      const uint8_t* src = lx(in, in.b, n * es);
      if (!dst || !src || overlaps(dst, n * es, src, n * es)) return false;  // any overlap
      run([=] { sfp_transpose(static_cast<uint32_t>(es), dst, src, rows, cols); },
          {{dst, n * es, true}, {src, n * es, false}});
      name = "transpose";
      break;
    }
    default:
      return false;
  }
  stats_.sfp_elements += n;
  timed(begin, latency::sfp(config_.chip, in, rows, cols), name, n, in);
  return true;
}

}  // namespace spyre::sim
