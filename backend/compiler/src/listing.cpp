// Program images as text: one decoded instruction per line, for TORCH_SPYRE_COMPILE_DEBUG dumps and
// for the device errors that name a faulting instruction. The field meanings are those of
// hw/include/spyre/hw/isa.h; every number is printed as the instruction holds it, so a line can be
// checked against the bytes.
#include <cstring>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "spyre/compiler/errors.h"
#include "spyre/compiler/program.h"

namespace spyre::compiler {

namespace {

const char* unary_name(uint64_t f) {
  static constexpr const char* kNames[] = {
      "copy",      "neg",  "abs",  "relu",  "sign", "floor",  "ceil",  "round", "trunc",   "exp", "exp2",
      "expm1",     "log",  "log2", "log1p", "sqrt", "rsqrt",  "recip", "tanh",  "sigmoid", "erf", "gelu_erf",
      "gelu_tanh", "silu", "sin",  "cos",   "not",  "bitnot", "isnan", "isinf", "square"};
  static_assert(std::size(kNames) == static_cast<size_t>(hw::UnaryFn::kCount));
  return f < std::size(kNames) ? kNames[f] : "?";
}

const char* binary_name(uint64_t f) {
  static constexpr const char* kNames[] = {"add",  "sub",      "mul", "div",    "max",   "min",    "pow",  "remainder",
                                           "fmod", "floordiv", "eq",  "ne",     "lt",    "le",     "gt",   "ge",
                                           "and",  "or",       "xor", "bitand", "bitor", "bitxor", "atan2"};
  static_assert(std::size(kNames) == static_cast<size_t>(hw::BinaryFn::kCount));
  return f < std::size(kNames) ? kNames[f] : "?";
}

const char* reduce_name(uint64_t f) {
  static constexpr const char* kNames[] = {"sum", "max", "min", "prod", "argmax", "argmin"};
  static_assert(std::size(kNames) == static_cast<size_t>(hw::ReduceFn::kCount));
  return f < std::size(kNames) ? kNames[f] : "?";
}

const char* cond_name(uint8_t c) {
  static constexpr const char* kNames[] = {"always", "eq", "ne", "ltu", "geu", "lt", "ge"};
  static_assert(std::size(kNames) == static_cast<size_t>(hw::Cond::kCount));
  return c < std::size(kNames) ? kNames[c] : "?";
}

const char* bcast_name(hw::Bcast b) {
  static constexpr const char* kNames[] = {"", ".row", ".col", ".scalar", ".imm"};
  static_assert(std::size(kNames) == static_cast<size_t>(hw::Bcast::kCount));
  const auto i = static_cast<size_t>(b);
  return i < std::size(kNames) ? kNames[i] : ".?";
}

// A scratchpad address: `lx[0x100]`, or `lx[r3+0x100]` when register rl is added to it.
std::string lx(uint64_t addr, uint32_t reg) {
  return reg == 0 ? fmt::format("lx[{:#x}]", addr) : fmt::format("lx[r{}+{:#x}]", reg, addr);
}

// A device address: register rd plus an offset.
std::string dev(uint32_t reg, uint64_t offset) {
  return reg == 0 ? fmt::format("mem[{:#x}]", offset) : fmt::format("mem[r{}+{:#x}]", reg, offset);
}

// An immediate added or multiplied as a wrapping 64-bit number: the negative ones as such.
std::string plus(uint64_t b) {
  const auto v = static_cast<int64_t>(b);
  return v < 0 ? fmt::format("- {:#x}", 0 - b) : fmt::format("+ {:#x}", b);
}
std::string times(uint64_t b) {
  return fmt::format("{}", static_cast<int64_t>(b));
}

// An SFP immediate (the high word of c): float32 bits for a float type, an int32 otherwise.
std::string immediate(uint64_t c, hw::DType t) {
  const auto bits = static_cast<uint32_t>(c >> 32);
  if (!hw::dtype_is_float(t)) return fmt::format("imm {}", static_cast<int32_t>(bits));
  float v = 0;
  std::memcpy(&v, &bits, sizeof v);
  return fmt::format("imm {}", v);
}

std::string dma_suffix(uint8_t flags) {
  return flags & hw::kDmaAsync ? fmt::format(" async tag {}", hw::dma_tag(flags)) : std::string();
}

}  // namespace

std::string disassemble(const hw::Instr& in) {
  const uint32_t rd = hw::reg_rd(in.regs), rl = hw::reg_rl(in.regs);
  const char* t = hw::dtype_name(in.dtype);
  const std::string block = fmt::format("{}x{}", in.d, in.e);  // SFP rows x cols
  const auto lo = [](uint64_t v) { return v & 0xffffffffu; };
  const auto hi = [](uint64_t v) { return v >> 32; };
  switch (in.op) {
    case hw::Op::kEnd:
      return "END";
    case hw::Op::kLi:
      return fmt::format("LI       r{} = {:#x}", in.a, in.b);
    case hw::Op::kArg:
      return fmt::format("ARG      r{} = arg[{}]", in.a, in.b);
    case hw::Op::kAddi:
      return fmt::format("ADDI     r{} = r{} {}", in.a, in.d, plus(in.b));
    case hw::Op::kAdd:
      return fmt::format("ADD      r{} = r{} + r{}", in.a, in.d, in.e);
    case hw::Op::kMuli:
      return fmt::format("MULI     r{} = r{} * {}", in.a, in.d, times(in.b));
    case hw::Op::kMul:
      return fmt::format("MUL      r{} = r{} * r{}", in.a, in.d, in.e);
    case hw::Op::kDivu:
      return fmt::format("DIVU     r{} = r{} / {}", in.a, in.d, in.b);
    case hw::Op::kRemu:
      return fmt::format("REMU     r{} = r{} % {}", in.a, in.d, in.b);
    case hw::Op::kBranch:
      return in.flags == 0 ? fmt::format("BRANCH   -> {}", in.a)
                           : fmt::format("BRANCH   -> {} if r{} {} r{}", in.a, in.d, cond_name(in.flags), in.e);
    case hw::Op::kBarrier:
      return in.flags == 0 ? "BARRIER"
                           : fmt::format("BARRIER  keeps the latest {} MATMUL(s) running", hw::barrier_keep(in.flags));
    case hw::Op::kPrint: {
      std::string regs;
      for (uint32_t i = 0; i < hw::print_reg_count(in.c) && i < hw::kMaxPrintRegs; ++i) {
        regs += fmt::format(", r{}", hw::print_reg(in.c, i));
      }
      const std::string values = in.e ? fmt::format(", {} {} at {}", in.e, t, lx(in.b, rl)) : "";
      return fmt::format("PRINT    message {}{}{}", in.a, regs, values);
    }
    case hw::Op::kRank:
      return fmt::format("RANK     r{} = rank, r{} = cores", in.a, in.a + 1);
    case hw::Op::kLoad:
    case hw::Op::kStore: {
      const bool load = in.op == hw::Op::kLoad;
      const std::string rows = fmt::format("{} rows x {} B stride {}", in.d, in.e, in.c);
      return load
                 ? fmt::format("LOAD     {} {} <- {} {}{}", t, lx(in.a, rl), dev(rd, in.b), rows, dma_suffix(in.flags))
                 : fmt::format("STORE    {} {} -> {} {}{}", t, lx(in.a, rl), dev(rd, in.b), rows, dma_suffix(in.flags));
    }
    case hw::Op::kLoadMulticast:
      return fmt::format("LOAD_MC  {} {} <- {} {} rows x {} B stride {}, to the ranks in r{}{}", t, lx(in.a, 0),
                         dev(rd, in.b), in.d, in.e, in.c, rl, dma_suffix(in.flags));
    case hw::Op::kWait:
      return fmt::format("WAIT     tags {:#x}", in.a);
    case hw::Op::kGather:
    case hw::Op::kScatter: {
      const bool gather = in.op == hw::Op::kGather;
      const hw::ScatterReduce r = hw::scatter_reduce(in.flags);
      const char* mode = gather                             ? ""
                         : r == hw::ScatterReduce::kAdd     ? "add "
                         : r == hw::ScatterReduce::kMul     ? "mul "
                         : r == hw::ScatterReduce::kMax     ? "max "
                         : r == hw::ScatterReduce::kMin     ? "min "
                         : r == hw::ScatterReduce::kInvalid ? "? "
                                                            : "";
      return fmt::format("{:<9}{}{} {} {} {}[{}[i] * {}] for {} rows x {} B, index < r{}{}",
                         gather ? "GATHER" : "SCATTER", mode, t, lx(in.a, 0), gather ? "<-" : "->", dev(rd, in.b),
                         lx(hi(in.c), 0), lo(in.c), in.d, in.e, rl, dma_suffix(in.flags));
    }
    case hw::Op::kMatmul:
      return fmt::format("MATMUL   {} {} {}= {} @ {}, M={} K={} N={}", t, lx(in.a, rl),
                         in.flags & hw::kMatmulAccumulate ? "+" : "", lx(lo(in.b), rl), lx(hi(in.b), rl),
                         hw::unpack_m(in.c), hw::unpack_k(in.c), hw::unpack_n(in.c));
    case hw::Op::kConvert:
      return fmt::format("CONVERT  {} {} = {} {} [{}]", t, lx(in.a, rl), hw::dtype_name(static_cast<hw::DType>(in.c)),
                         lx(in.b, rl), block);
    case hw::Op::kUnary:
      return fmt::format("UNARY    {} {} = {}({}{}) [{}]", t, lx(in.a, rl), unary_name(in.c), lx(in.b, rl),
                         bcast_name(static_cast<hw::Bcast>(in.flags & 7u)), block);
    case hw::Op::kBinary: {
      const auto operand = [&](uint64_t addr, hw::Bcast b) {
        return b == hw::Bcast::kImm ? immediate(in.c, in.dtype) : lx(addr, rl) + bcast_name(b);
      };
      return fmt::format("BINARY   {} {} = {}({}, {}) [{}]", t, lx(in.a, rl), binary_name(in.c & 0xff),
                         operand(lo(in.b), hw::bcast_src0(in.flags)), operand(hi(in.b), hw::bcast_src1(in.flags)),
                         block);
    }
    case hw::Op::kSelect: {
      const hw::Bcast b1 = hw::bcast_src0(in.flags), b2 = hw::bcast_src1(in.flags);
      const std::string src2 = b2 == hw::Bcast::kImm ? immediate(in.c, in.dtype) : lx(lo(in.c), rl) + bcast_name(b2);
      return fmt::format("SELECT   {} {} = {} ? {}{} : {} [{}]", t, lx(in.a, rl), lx(lo(in.b), rl), lx(hi(in.b), rl),
                         bcast_name(b1), src2, block);
    }
    case hw::Op::kFma:
      return fmt::format("FMA      {} {} = {} * {} + {} [{}]", t, lx(in.a, rl), lx(lo(in.b), rl), lx(hi(in.b), rl),
                         lx(in.c, rl), block);
    case hw::Op::kReduce:
      return fmt::format("REDUCE   {} {} {}= {}({}) [{}]", t, lx(in.a, rl), in.flags & hw::kReduceAccumulate ? "+" : "",
                         reduce_name(in.c & 0xff), lx(in.b, rl), block);
    case hw::Op::kFill: {
      double v = 0;
      std::memcpy(&v, &in.c, sizeof v);
      return fmt::format("FILL     {} {} = {} [{}]", t, lx(in.a, rl), v, block);
    }
    case hw::Op::kIota: {
      double start = 0, step = 0;
      std::memcpy(&start, &in.b, sizeof start);
      std::memcpy(&step, &in.c, sizeof step);
      return fmt::format("IOTA     {} {} = {} + (r{} + i) * {} [{}]", t, lx(in.a, rl), start, rd, step, block);
    }
    case hw::Op::kTranspose:
      return fmt::format("TRANSP   {} {} = {}^T [{}]", t, lx(in.a, rl), lx(in.b, rl), block);
    case hw::Op::kScan:
      return fmt::format("SCAN     {} {} = cum{}({}) [{}]", t, lx(in.a, rl), (in.c & 0xff) == 0 ? "sum" : "prod",
                         lx(in.b, rl), block);
    case hw::Op::kRandom:
      return fmt::format("RANDOM   {} {} = {}(key r{}, counter r{}) [{}]", t, lx(in.a, rl),
                         in.flags & 1 ? "normal" : "uniform", rd, rd + 1, block);
    case hw::Op::kSort:
      return fmt::format("SORT     {} {} = sort{}({}), indices {} [{}]", t, lx(in.a, rl),
                         in.flags & hw::kSortDescending ? " descending" : "", lx(in.b, rl), lx(in.c, rl), block);
  }
  return fmt::format("?        op {:#04x} {} flags={:#04x} regs={:#04x} a={} b={:#x} c={:#x} d={} e={}",
                     static_cast<unsigned>(in.op), t, in.flags, in.regs, in.a, in.b, in.c, in.d, in.e);
}

std::string listing(const std::vector<uint8_t>& image, const ProgramNotes& notes) {
  hw::ProgramHeader h{};
  if (image.size() < sizeof h) throw Malformed("listing: an image shorter than its header");
  std::memcpy(&h, image.data(), sizeof h);
  if (h.magic != hw::kProgramMagic) throw Malformed("listing: not a program image");
  if (h.instr_offset + uint64_t{h.num_instrs} * sizeof(hw::Instr) > image.size()) {
    throw Malformed("listing: instructions past the end of the image");
  }
  std::string out = fmt::format("; {} instructions, {} cores\n", h.num_instrs, h.num_entries);
  size_t section = 0;
  for (uint32_t i = 0; i < h.num_instrs; ++i) {
    hw::Instr in{};
    std::memcpy(&in, image.data() + h.instr_offset + i * sizeof(hw::Instr), sizeof in);
    for (; section < notes.sections.size() && notes.sections[section].first <= i; ++section) {
      out += fmt::format("; {}\n", notes.sections[section].second);
    }
    std::string line = fmt::format("{:5d}  {}", i, disassemble(in));
    if (in.op == hw::Op::kArg && in.b < notes.args.size() && !notes.args[in.b].empty()) {
      line += fmt::format("    ; {}", notes.args[in.b]);
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace spyre::compiler
