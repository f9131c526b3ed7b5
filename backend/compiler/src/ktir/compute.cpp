// KTIR arithmetic on scratchpad tensors: each linalg, arith and math op on tensors becomes the SFP
// or PT instruction that the compiler's own lowerings use for the same arithmetic (BINARY, UNARY,
// CONVERT, FILL, REDUCE, TRANSPOSE, MATMUL), over the tensor as rows x cols (its last dim the
// columns). Ops on scalars known at compile time are folded.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::ktir {
namespace {

using hw::Bcast;
using hw::BinaryFn;
using hw::DType;
using hw::UnaryFn;

struct RowsCols {
  uint32_t rows, cols;
};
RowsCols rc(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const int64_t cols = shape.empty() ? 1 : std::max<int64_t>(shape.back(), 1);
  return {static_cast<uint32_t>(n / cols), static_cast<uint32_t>(cols)};
}

}  // namespace

std::optional<BinaryFn> binary_fn(const std::string& n) {
  const std::string f = n.substr(n.find('.') + 1);
  if (f == "addf" || f == "add" || f == "addi") return BinaryFn::kAdd;
  if (f == "subf" || f == "sub" || f == "subi") return BinaryFn::kSub;
  if (f == "mulf" || f == "mul" || f == "muli") return BinaryFn::kMul;
  if (f == "divf" || f == "div") return BinaryFn::kDiv;
  if (f == "maximumf" || f == "maxnumf" || f == "max") return BinaryFn::kMax;
  if (f == "minimumf" || f == "minnumf" || f == "min") return BinaryFn::kMin;
  if (f == "powf") return BinaryFn::kPow;
  return std::nullopt;
}

std::optional<UnaryFn> unary_fn(const std::string& n) {
  static const std::map<std::string, UnaryFn> kFns = {
      {"exp", UnaryFn::kExp},     {"exp2", UnaryFn::kExp2},     {"expm1", UnaryFn::kExpm1},
      {"log", UnaryFn::kLog},     {"log2", UnaryFn::kLog2},     {"log1p", UnaryFn::kLog1p},
      {"sqrt", UnaryFn::kSqrt},   {"rsqrt", UnaryFn::kRsqrt},   {"tanh", UnaryFn::kTanh},
      {"erf", UnaryFn::kErf},     {"absf", UnaryFn::kAbs},      {"abs", UnaryFn::kAbs},
      {"negf", UnaryFn::kNeg},    {"ceil", UnaryFn::kCeil},     {"floor", UnaryFn::kFloor},
      {"round", UnaryFn::kRound}, {"trunc", UnaryFn::kTrunc},   {"sin", UnaryFn::kSin},
      {"cos", UnaryFn::kCos},     {"square", UnaryFn::kSquare}, {"reciprocal", UnaryFn::kReciprocal},
      {"copy", UnaryFn::kCopy}};
  const auto f = kFns.find(n.substr(n.find('.') + 1));
  return f == kFns.end() ? std::nullopt : std::optional<UnaryFn>(f->second);
}

double fold_binary(BinaryFn f, double a, double b) {
  switch (f) {
    case BinaryFn::kAdd:
      return a + b;
    case BinaryFn::kSub:
      return a - b;
    case BinaryFn::kMul:
      return a * b;
    case BinaryFn::kDiv:
      return a / b;
    case BinaryFn::kMax:  // a NaN wins, as on the SFP
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
    case BinaryFn::kMin:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
    default:
      return std::pow(a, b);
  }
}

double fold_unary(UnaryFn f, double x) {
  switch (f) {
    case UnaryFn::kExp:
      return std::exp(x);
    case UnaryFn::kLog:
      return std::log(x);
    case UnaryFn::kSqrt:
      return std::sqrt(x);
    case UnaryFn::kRsqrt:
      return 1 / std::sqrt(x);
    case UnaryFn::kNeg:
      return -x;
    case UnaryFn::kAbs:
      return std::fabs(x);
    case UnaryFn::kReciprocal:
      return 1 / x;
    case UnaryFn::kTanh:
      return std::tanh(x);
    case UnaryFn::kCopy:
      return x;
    default:
      throw Unsupported("ktir: this math function of a constant is not folded");
  }
}

std::optional<hw::ReduceFn> reduce_fn(std::optional<BinaryFn> combine) {
  if (combine == BinaryFn::kAdd) return hw::ReduceFn::kSum;
  if (combine == BinaryFn::kMax) return hw::ReduceFn::kMax;
  if (combine == BinaryFn::kMin) return hw::ReduceFn::kMin;
  if (combine == BinaryFn::kMul) return hw::ReduceFn::kProd;
  return std::nullopt;
}

namespace {

uint64_t fill_bits(double x, DType t, int line) {
  return hw::dtype_is_float(t) ? emit::double_bits(x) : integer_bits(x, line);
}

}  // namespace

void Lowering::copy(const TensorV& from, const TensorV& to) {
  if (from.numel() != to.numel()) throw Malformed(fmt::format("ktir: line {}: a copy between sizes", line_));
  if (from.numel() == 0 || from.addr == to.addr) return;
  const RowsCols s = rc(to.shape);
  before_read(from.addr, from.bytes());
  before_write(to.addr, to.bytes());
  if (from.dtype == to.dtype) {
    emit(emit::sfp(hw::Op::kUnary, to.dtype, 0, to.addr, from.addr, static_cast<uint64_t>(UnaryFn::kCopy), s.rows,
                   s.cols));
  } else {
    emit(emit::sfp(hw::Op::kConvert, to.dtype, 0, to.addr, from.addr, static_cast<uint64_t>(from.dtype), s.rows,
                   s.cols));
  }
  shared_.work.sfp_elements += static_cast<uint64_t>(to.numel());
}

TensorV Lowering::scalar_tensor(double x, DType dtype, int line) {
  TensorV t = new_tensor({}, dtype, line);
  before_write(t.addr, t.bytes());
  emit(emit::sfp(hw::Op::kFill, dtype, 0, t.addr, 0, fill_bits(x, dtype, line), 1, 1));
  return t;
}

TensorV Lowering::destination(const std::string& outs, const std::vector<int64_t>& shape, DType dtype, bool keep,
                              int line) {
  const TensorV o = tensor(outs, line);
  if (o.numel() != TensorV{0, shape, dtype}.numel()) {
    throw Malformed(fmt::format("ktir: line {}: the result [{}] does not fit outs {} [{}]", line, fmt::join(shape, "x"),
                                outs, fmt::join(o.shape, "x")));
  }
  if ((o.fresh || last_use(outs)) && !o.shared && o.dtype == dtype) {
    auto& held = std::get<TensorV>(value(outs, line));
    held.fresh = false;  // a second op into the same tensor.empty gets its own bytes
    TensorV r = o;
    r.shape = shape;
    r.fresh = false;
    return r;
  }
  TensorV r = new_tensor(shape, dtype, line);
  if (keep && !o.fresh) copy(o, r);
  r.zero = keep && o.zero;
  return r;
}

void Lowering::elementwise(const Op& o) {
  const auto fn = binary_fn(o.name);
  const bool named = o.name.rfind("linalg.", 0) == 0;
  const std::vector<std::string> in = named ? group(o, "ins") : operands(o);
  if (!fn || in.size() != 2) throw Malformed(fmt::format("ktir: line {}: {} takes two operands", o.line, o.name));
  const Value& a = value(in[0], o.line);
  if (!named && !std::holds_alternative<TensorV>(a)) {
    define(o, {fold_binary(*fn, scalar(in[0], o.line), scalar(in[1], o.line))});
    return;
  }
  const TensorV x = tensor(in[0], o.line), y = tensor(in[1], o.line);
  if (x.shape != y.shape || x.dtype != y.dtype) {
    throw Malformed(fmt::format("ktir: line {}: {} of tensors of different shapes or types", o.line, o.name));
  }
  TensorV r;
  if (named) {
    const std::vector<std::string> outs = group(o, "outs");
    if (outs.size() != 1) throw Malformed(fmt::format("ktir: line {}: {} needs one outs", o.line, o.name));
    r = destination(outs[0], x.shape, tensor(outs[0], o.line).dtype, false, o.line);
  } else {
    r = new_tensor(x.shape, x.dtype, o.line);
  }
  TensorV in_type = r;  // the SFP computes in the operands' type; convert after when outs differs
  if (r.dtype != x.dtype) in_type = new_tensor(x.shape, x.dtype, o.line);
  const RowsCols s = rc(x.shape);
  if (x.numel() > 0) {
    before_read(x.addr, x.bytes());
    before_read(y.addr, y.bytes());
    before_write(in_type.addr, in_type.bytes());
    emit(emit::sfp(hw::Op::kBinary, x.dtype, 0, in_type.addr, emit::pack2(x.addr, y.addr), static_cast<uint64_t>(*fn),
                   s.rows, s.cols, hw::bcast_flags(Bcast::kFull, Bcast::kFull)));
    shared_.work.sfp_elements += static_cast<uint64_t>(x.numel());
  }
  if (in_type.addr != r.addr) copy(in_type, r);
  r.zero = false;
  define(o, {r});
}

void Lowering::math_unary(const Op& o) {
  const auto fn = unary_fn(o.name);
  if (!fn) throw Unsupported(fmt::format("ktir: line {}: {} is not supported", o.line, o.name));
  const bool named = o.name.rfind("linalg.", 0) == 0;
  const std::vector<std::string> in = named ? group(o, "ins") : operands(o);
  if (in.size() != 1) throw Malformed(fmt::format("ktir: line {}: {} takes one operand", o.line, o.name));
  if (!std::holds_alternative<TensorV>(value(in[0], o.line))) {
    define(o, {fold_unary(*fn, scalar(in[0], o.line))});
    return;
  }
  const TensorV x = tensor(in[0], o.line);
  const std::vector<std::string> outs = named ? group(o, "outs") : std::vector<std::string>{};
  if (named && outs.size() != 1) throw Malformed(fmt::format("ktir: line {}: {} needs one outs", o.line, o.name));
  TensorV r = named ? destination(outs[0], x.shape, x.dtype, false, o.line) : new_tensor(x.shape, x.dtype, o.line);
  if (r.dtype != x.dtype) throw Malformed(fmt::format("ktir: line {}: {} changes the element type", o.line, o.name));
  const RowsCols s = rc(x.shape);
  if (x.numel() > 0) {
    before_read(x.addr, x.bytes());
    before_write(r.addr, r.bytes());
    emit(emit::sfp(hw::Op::kUnary, x.dtype, 0, r.addr, x.addr, static_cast<uint64_t>(*fn), s.rows, s.cols));
    shared_.work.sfp_elements += static_cast<uint64_t>(x.numel());
  }
  r.zero = false;
  define(o, {r});
}

void Lowering::convert(const Op& o) {
  const std::vector<std::string> in = operands(o);
  if (in.size() != 1) throw Malformed(fmt::format("ktir: line {}: {} takes one operand", o.line, o.name));
  if (!std::holds_alternative<TensorV>(value(in[0], o.line))) {
    define(o, {value(in[0], o.line)});
    return;
  }
  const TensorV x = tensor(in[0], o.line);
  const auto [shape, dtype] = shaped(o.last().text, o.line);
  TensorV r = new_tensor(shape, dtype, o.line);
  copy(x, r);
  define(o, {r});
}

void Lowering::fill(const Op& o) {
  const std::vector<std::string> in = group(o, "ins"), outs = group(o, "outs");
  if (in.size() != 1 || outs.size() != 1)
    throw Malformed(fmt::format("ktir: line {}: linalg.fill ins(%v) outs(%t)", o.line));
  const double v = scalar(in[0], o.line);
  const TensorV target = tensor(outs[0], o.line);
  TensorV r = destination(outs[0], target.shape, target.dtype, false, o.line);
  const RowsCols s = rc(r.shape);
  if (r.numel() > 0) {
    before_write(r.addr, r.bytes());
    emit(emit::sfp(hw::Op::kFill, r.dtype, 0, r.addr, 0, fill_bits(v, r.dtype, o.line), s.rows, s.cols));
    shared_.work.sfp_elements += static_cast<uint64_t>(r.numel());
  }
  r.zero = v == 0;
  define(o, {r});
}

void Lowering::matmul(const Op& o) {
  const std::vector<std::string> in = group(o, "ins"), outs = group(o, "outs");
  if (in.size() != 2 || outs.size() != 1) {
    throw Malformed(fmt::format("ktir: line {}: {} ins(%a, %b) outs(%c)", o.line, o.name));
  }
  const TensorV a = tensor(in[0], o.line), b = tensor(in[1], o.line), c = tensor(outs[0], o.line);
  const bool batched = o.name == "linalg.batch_matmul";
  const size_t rank = batched ? 3 : 2;
  if (a.shape.size() != rank || b.shape.size() != rank || c.shape.size() != rank || a.dtype != b.dtype) {
    throw Malformed(fmt::format("ktir: line {}: {} of shapes [{}] [{}] into [{}]", o.line, o.name,
                                fmt::join(a.shape, "x"), fmt::join(b.shape, "x"), fmt::join(c.shape, "x")));
  }
  const int64_t batch = batched ? a.shape[0] : 1;
  const int64_t m = a.shape[rank - 2], k = a.shape[rank - 1], n = b.shape[rank - 1];
  if (b.shape[rank - 2] != k || c.shape[rank - 2] != m || c.shape[rank - 1] != n ||
      (batched && (b.shape[0] != batch || c.shape[0] != batch))) {
    throw Malformed(fmt::format("ktir: line {}: {} of shapes [{}] [{}] into [{}]", o.line, o.name,
                                fmt::join(a.shape, "x"), fmt::join(b.shape, "x"), fmt::join(c.shape, "x")));
  }
  const bool accumulate = !(c.zero || c.fresh);
  TensorV r = destination(outs[0], c.shape, c.dtype, c.dtype == DType::kF32 && accumulate, o.line);
  TensorV acc = r;  // the PT array accumulates in fp32
  if (c.dtype != DType::kF32) {
    acc = new_tensor(c.shape, DType::kF32, o.line);
    if (accumulate) copy(c, acc);
  }
  before_read(a.addr, a.bytes());
  before_read(b.addr, b.bytes());
  before_write(acc.addr, acc.bytes());
  const uint32_t esz = hw::dtype_size(a.dtype);
  for (int64_t i = 0; i < batch && m * n * k > 0; ++i) {
    hw::Instr mm = emit::instr(hw::Op::kMatmul);
    mm.dtype = a.dtype;
    mm.flags = accumulate ? hw::kMatmulAccumulate : 0;
    mm.a = acc.addr + static_cast<uint32_t>(i * m * n * 4);
    mm.b =
        emit::pack2(a.addr + static_cast<uint32_t>(i * m * k * esz), b.addr + static_cast<uint32_t>(i * k * n * esz));
    mm.c = hw::pack_mkn(static_cast<uint64_t>(m), static_cast<uint64_t>(k), static_cast<uint64_t>(n));
    emit(mm);
  }
  const auto macs = static_cast<uint64_t>(batch * m * n * k);
  shared_.work.macs += macs;
  if (a.dtype == DType::kF32) shared_.work.fp32_macs += macs;
  if (acc.addr != r.addr) copy(acc, r);
  r.zero = false;
  define(o, {r});
}

void Lowering::reduce(const Op& o) {
  const std::vector<std::string> in = group(o, "ins"), outs = group(o, "outs");
  if (in.size() != 1 || outs.size() != 1)
    throw Malformed(fmt::format("ktir: line {}: linalg.reduce ins(%x) outs(%init)", o.line));
  // The combiner: the region's one arith op (`{ arith.addf }` or a block that yields it).
  std::optional<BinaryFn> fn;
  for (const Region& rg : o.regions) {
    for (const Block& b : rg.blocks) {
      for (const Op& inner : b.ops) {
        if (!fn) fn = binary_fn(inner.name);
      }
    }
  }
  const std::optional<hw::ReduceFn> combine = reduce_fn(fn);
  if (!combine) {
    throw Unsupported(fmt::format("ktir: line {}: a linalg.reduce whose combiner is not add, max, min or mul", o.line));
  }
  const hw::ReduceFn rf = *combine;
  TensorV x = tensor(in[0], o.line);
  const TensorV init = tensor(outs[0], o.line);
  const std::vector<int64_t> dims = int_list(o, "dimensions");
  const auto last = static_cast<int64_t>(x.shape.size()) - 1;
  if (x.shape.size() == 2 && dims == std::vector<int64_t>{0}) {  // a column reduction: transpose first
    TensorV t = new_tensor({x.shape[1], x.shape[0]}, x.dtype, o.line);
    before_read(x.addr, x.bytes());
    before_write(t.addr, t.bytes());
    emit(emit::sfp(hw::Op::kTranspose, x.dtype, 0, t.addr, x.addr, 0, static_cast<uint32_t>(x.shape[0]),
                   static_cast<uint32_t>(x.shape[1])));
    x = t;
  } else if (dims != std::vector<int64_t>{last}) {
    throw Unsupported(
        fmt::format("ktir: line {}: a linalg.reduce over dims [{}] (the last dim, or dim 0 of a matrix, "
                    "is taken)",
                    o.line, fmt::join(dims, ", ")));
  }
  std::vector<int64_t> shape(x.shape.begin(), x.shape.end() - 1);
  if (x.dtype != init.dtype) {  // reduce in the accumulator's type
    TensorV c = new_tensor(x.shape, init.dtype, o.line);
    copy(x, c);
    x = c;
  }
  const bool accumulate = !init.fresh && !(init.zero && rf == hw::ReduceFn::kSum);
  TensorV r = destination(outs[0], init.shape, init.dtype, accumulate, o.line);
  const RowsCols s = rc(x.shape);
  if (x.numel() > 0) {
    before_read(x.addr, x.bytes());
    before_write(r.addr, r.bytes());
    emit(emit::sfp(hw::Op::kReduce, x.dtype, 0, r.addr, x.addr, static_cast<uint64_t>(rf), s.rows, s.cols,
                   accumulate ? hw::kReduceAccumulate : 0));
    shared_.work.sfp_elements += static_cast<uint64_t>(x.numel());
  }
  r.zero = false;
  define(o, {r});
}

void Lowering::broadcast(const Op& o) {
  const std::vector<std::string> in = group(o, "ins"), outs = group(o, "outs");
  if (in.size() != 1 || outs.size() != 1)
    throw Malformed(fmt::format("ktir: line {}: linalg.broadcast ins outs", o.line));
  const TensorV x = tensor(in[0], o.line);
  const TensorV target = tensor(outs[0], o.line);
  const std::vector<int64_t> dims = int_list(o, "dimensions");
  const auto rank = static_cast<int64_t>(target.shape.size());
  Bcast mode;
  if (x.shape.empty() || x.numel() == 1) {
    mode = Bcast::kScalar;
  } else if (dims == std::vector<int64_t>{rank - 1}) {
    mode = Bcast::kCol;  // one value per row, across the columns
  } else {
    bool leading = !dims.empty();
    for (size_t i = 0; i < dims.size(); ++i) leading = leading && dims[i] == static_cast<int64_t>(i);
    if (!leading || static_cast<int64_t>(dims.size()) != rank - 1) {
      throw Unsupported(
          fmt::format("ktir: line {}: a linalg.broadcast along dims [{}] (the last dim, or all but the "
                      "last, is taken)",
                      o.line, fmt::join(dims, ", ")));
    }
    mode = Bcast::kRow;
  }
  if (x.dtype != target.dtype) throw Malformed(fmt::format("ktir: line {}: linalg.broadcast changes the type", o.line));
  TensorV r = destination(outs[0], target.shape, target.dtype, false, o.line);
  const RowsCols s = rc(r.shape);
  if (r.numel() > 0) {
    before_read(x.addr, x.bytes());
    before_write(r.addr, r.bytes());
    emit(emit::sfp(hw::Op::kUnary, r.dtype, 0, r.addr, x.addr, static_cast<uint64_t>(UnaryFn::kCopy), s.rows, s.cols,
                   static_cast<uint8_t>(mode)));
    shared_.work.sfp_elements += static_cast<uint64_t>(r.numel());
  }
  define(o, {r});
}

void Lowering::transpose(const Op& o) {
  const std::vector<std::string> in = group(o, "ins"), outs = group(o, "outs");
  if (in.size() != 1 || outs.size() != 1)
    throw Malformed(fmt::format("ktir: line {}: linalg.transpose ins outs", o.line));
  const TensorV x = tensor(in[0], o.line);
  const std::vector<int64_t> perm = int_list(o, "permutation");
  const size_t rank = x.shape.size();
  bool swap_last = rank >= 2 && perm.size() == rank;
  for (size_t i = 0; swap_last && i + 2 < rank; ++i) swap_last = perm[i] == static_cast<int64_t>(i);
  swap_last =
      swap_last && perm[rank - 2] == static_cast<int64_t>(rank - 1) && perm[rank - 1] == static_cast<int64_t>(rank - 2);
  if (!swap_last) {
    throw Unsupported(fmt::format("ktir: line {}: a transpose by [{}] (swapping the last two dims is taken)", o.line,
                                  fmt::join(perm, ", ")));
  }
  std::vector<int64_t> shape = x.shape;
  std::swap(shape[rank - 1], shape[rank - 2]);
  TensorV r = destination(outs[0], shape, x.dtype, false, o.line);
  if (r.addr == x.addr) r = new_tensor(shape, x.dtype, o.line);  // TRANSPOSE cannot work in place
  const int64_t rows = x.shape[rank - 2], cols = x.shape[rank - 1];
  const int64_t batches = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  before_read(x.addr, x.bytes());
  before_write(r.addr, r.bytes());
  const uint32_t step = static_cast<uint32_t>(rows * cols) * hw::dtype_size(x.dtype);
  for (int64_t i = 0; i < batches; ++i) {
    emit(emit::sfp(hw::Op::kTranspose, x.dtype, 0, r.addr + static_cast<uint32_t>(i) * step,
                   x.addr + static_cast<uint32_t>(i) * step, 0, static_cast<uint32_t>(rows),
                   static_cast<uint32_t>(cols)));
  }
  shared_.work.sfp_elements += static_cast<uint64_t>(x.numel());
  define(o, {r});
}

void Lowering::reshape(const Op& o) {
  const std::vector<std::string> in = operands(o);
  if (in.empty()) throw Malformed(fmt::format("ktir: line {}: {} without an operand", o.line, o.name));
  TensorV x = tensor(in[0], o.line);
  const auto [shape, dtype] = shaped(o.last().text, o.line);
  TensorV r = x;
  r.shape = shape;
  if (r.numel() != x.numel() || dtype != x.dtype) {
    throw Malformed(
        fmt::format("ktir: line {}: {} from [{}] to {}", o.line, o.name, fmt::join(x.shape, "x"), o.last().text));
  }
  std::get<TensorV>(value(in[0], o.line)).shared = true;
  r.shared = true;
  define(o, {r});
}

}  // namespace spyre::compiler::ktir

namespace spyre::compiler::ktir {

// gpu.printf "format", %index..., %tensor : types -> PRINT: the indices (known per tile) in
// registers r13..r15, the tensor's elements as the record's values.
void Lowering::printf(const Op& o) {
  if (o.tok(0).kind != Token::Kind::kString) {
    throw Malformed(fmt::format("ktir: line {}: gpu.printf without a format string", o.line));
  }
  std::vector<std::string>& strings = shared_.strings;
  const auto found = std::find(strings.begin(), strings.end(), o.tok(0).text);
  const auto message = static_cast<uint32_t>(found - strings.begin());
  if (found == strings.end()) strings.push_back(o.tok(0).text);
  std::vector<int64_t> ints;
  std::optional<TensorV> values;
  for (const std::string& name : operands(o)) {
    const Value& v = value(name, o.line);
    if (values)
      throw Unsupported(fmt::format("ktir: line {}: gpu.printf takes a tensor only as its last argument", o.line));
    if (const auto* i = std::get_if<int64_t>(&v)) {
      ints.push_back(*i);
    } else if (const auto* t = std::get_if<TensorV>(&v)) {
      values = *t;
    } else {
      throw Unsupported(
          fmt::format("ktir: line {}: gpu.printf of {}, which is neither an index nor a tensor (put a "
                      "float scalar in a tensor)",
                      o.line, name));
    }
  }
  constexpr uint32_t kFirst = 13;  // r13..r15: free between the workspace's and the gather's uses
  if (ints.size() > 3) throw Unsupported(fmt::format("ktir: line {}: gpu.printf of more than 3 indices", o.line));
  if (values && values->numel() > hw::kMaxPrintValues) {
    throw Unsupported(fmt::format("ktir: line {}: gpu.printf of a tensor of {} elements (at most {})", o.line,
                                  values->numel(), hw::kMaxPrintValues));
  }
  for (size_t i = 0; i < ints.size(); ++i)
    emit(emit::li(kFirst + static_cast<uint32_t>(i), static_cast<uint64_t>(ints[i])));
  hw::Instr p = emit::instr(hw::Op::kPrint);
  p.a = message;
  p.c = hw::print_regs(static_cast<uint32_t>(ints.size()), kFirst, kFirst + 1, kFirst + 2);
  if (values && values->numel() > 0) {
    before_read(values->addr, values->bytes());
    p.dtype = values->dtype;
    p.b = values->addr;
    p.e = static_cast<uint32_t>(values->numel());
  }
  emit(p);
}

}  // namespace spyre::compiler::ktir
