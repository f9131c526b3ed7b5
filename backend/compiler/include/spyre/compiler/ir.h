// The compiler's tensor IR: a graph of operations on strided, typed views of device buffers.
// Eager ops hand the compiler a one-op graph; torch.compile will hand it whole graphs. No torch:
// the front doors translate their tensors into these views.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spyre/compiler/errors.h"
#include "spyre/hw/isa.h"

namespace spyre::compiler::ir {

/// A strided view of a device buffer. The buffer's base address is launch argument `arg`;
/// sizes, strides and offset count elements of `dtype` (strides may be 0 for broadcasts).
struct View {
  uint32_t arg = 0;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  hw::DType dtype = hw::DType::kF32;

  int64_t numel() const;
  /// "f32 [64, 32]", with " strides [...]" when not row-major and " + offset" when not at the base.
  std::string describe() const;
};

/// An input of a pointwise op: a view (broadcast to the output's shape, aligned at the right as in
/// NumPy), or a scalar constant.
struct Operand {
  enum class Kind : uint8_t { kView, kScalar } kind = Kind::kView;
  uint32_t view = 0;  // index into Graph::views
  double scalar = 0;
  // kScalar: the value as an integer when it is one, exactly (a double holds integers only up to
  // 2**53): what an integer op computes with.
  std::optional<int64_t> integer;

  static Operand of(uint32_t v) { return {Kind::kView, v, 0, std::nullopt}; }
  static Operand constant(double x) { return {Kind::kScalar, 0, x, exact(x)}; }
  static Operand constant_int(int64_t x) { return {Kind::kScalar, 0, static_cast<double>(x), x}; }
  /// `x` as an int64 when it is a whole number that one holds exactly, else nullopt.
  static std::optional<int64_t> exact(double x) {
    if (!(x >= -9.2233720368547758e18 && x < 9.2233720368547758e18) ||
        x != static_cast<double>(static_cast<int64_t>(x))) {
      return std::nullopt;
    }
    return static_cast<int64_t>(x);
  }
};

/// What a pointwise op computes, element by element, in its compute type.
enum class PointwiseKind : uint8_t {
  kCopy,        // out = in0 (with conversion from in0's type to out's)
  kUnary,       // out = unary(in0)
  kBinary,      // out = binary(in0, in1)
  kSelect,      // out = in0 ? in1 : in2 (in0 is bool)
  kFma,         // out = in0 * in1 + in2
  kFill,        // out = scalar (no inputs)
  kIota,        // out[i] = start + i * step over the output's elements in row-major order (1-D output)
  kRandom,      // out[i] = uniform [0, 1) (start 0) or standard normal (start 1) number of element i
                // (1-D output), from the key and counter base in launch arguments rng_arg, rng_arg + 1
  kReduce,      // a row reduction: reduce (sum, max, min or prod) of in0 over the output's last dim,
                // the same value for every element of a row (a layer norm's mean, a softmax's max)
  kRound,       // out = in0 rounded to the step's `to` (fp16 or bf16) and back: a fused fp16 or bf16
                // intermediate takes the value its store would have given it
  kRotateHalf,  // out = cat(-in0[..., h:], in0[..., :h]) over the output's last dim of 2h (a rotary
                // embedding's rotation, as HuggingFace's rotate_half writes it)
};

/// One step of a pointwise expression. An argument names an input of the op (i >= 0) or the result
/// of an earlier step (step_ref(j)). Comparisons, logical functions and IsNan give bool; every other
/// step gives the op's compute type.
struct Step {
  PointwiseKind kind = PointwiseKind::kCopy;
  hw::UnaryFn unary = hw::UnaryFn::kCopy;
  hw::BinaryFn binary = hw::BinaryFn::kAdd;
  std::vector<int32_t> args;
  double start = 0, step = 1;                // kFill uses start as the value; kIota both
  std::optional<int64_t> start_int;          // kFill: the value exactly, when it is an integer
  hw::ReduceFn reduce = hw::ReduceFn::kSum;  // kReduce
  hw::DType to = hw::DType::kF32;            // kRound: the narrow type the value is rounded to
};
constexpr int32_t step_ref(uint32_t j) {
  return -1 - static_cast<int32_t>(j);
}

/// An elementwise op: one step (the fields below, over `inputs` in order) or an expression of
/// several (`steps`, evaluated per element in one pass over the data; the last step is the result).
struct Pointwise {
  PointwiseKind kind = PointwiseKind::kCopy;
  hw::UnaryFn unary = hw::UnaryFn::kCopy;
  hw::BinaryFn binary = hw::BinaryFn::kAdd;
  hw::DType compute = hw::DType::kF32;  // inputs convert to it, the result converts to the output's type
  std::vector<Operand> inputs;
  uint32_t out = 0;
  double start = 0, step = 1;        // kFill uses start as the value; kIota both
  std::optional<int64_t> start_int;  // kFill: the value exactly, when it is an integer
  int32_t rng_arg = -1;              // kRandom: the argument slot of the key (the counter base follows)
  std::vector<Step> steps;

  /// The expression: `steps`, or the single step the other fields describe.
  std::vector<Step> expression() const;
};

/// Builds a multi-step pointwise op: each call returns the argument naming what it added.
///   Expr e(hw::DType::kF32);
///   const int32_t x = e.input(Operand::of(v)), s = e.unary(hw::UnaryFn::kSigmoid, x);
///   graph.ops.push_back(... e.done(out) ...);   // x * sigmoid(x)
class Expr {
 public:
  explicit Expr(hw::DType compute) { p_.compute = compute; }
  int32_t input(Operand o) {
    p_.inputs.push_back(o);
    return static_cast<int32_t>(p_.inputs.size() - 1);
  }
  int32_t constant(double x) { return input(Operand::constant(x)); }
  int32_t constant_int(int64_t x) { return input(Operand::constant_int(x)); }
  int32_t unary(hw::UnaryFn f, int32_t a) { return add(PointwiseKind::kUnary, {a}, f, hw::BinaryFn::kAdd); }
  int32_t binary(hw::BinaryFn f, int32_t a, int32_t b) {
    return add(PointwiseKind::kBinary, {a, b}, hw::UnaryFn::kCopy, f);
  }
  int32_t select(int32_t mask, int32_t a, int32_t b) {
    return add(PointwiseKind::kSelect, {mask, a, b}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd);
  }
  int32_t fma(int32_t a, int32_t b, int32_t c) {  // a * b + c
    return add(PointwiseKind::kFma, {a, b, c}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd);
  }
  int32_t copy(int32_t a) { return add(PointwiseKind::kCopy, {a}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd); }
  /// a rounded to narrow type t (fp16 or bf16), still in the compute type.
  int32_t round(hw::DType t, int32_t a) {
    const int32_t r = add(PointwiseKind::kRound, {a}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd);
    p_.steps.back().to = t;
    return r;
  }
  /// f of a over each row (the output's last dim), broadcast along it.
  int32_t reduce(hw::ReduceFn f, int32_t a) {
    const int32_t r = add(PointwiseKind::kReduce, {a}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd);
    p_.steps.back().reduce = f;
    return r;
  }
  int32_t fill(double value) {
    const int32_t r = add(PointwiseKind::kFill, {}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd);
    p_.steps.back().start = value;
    p_.steps.back().start_int = Operand::exact(value);
    return r;
  }
  /// A fill with the value of a scalar operand (an integer exactly).
  int32_t fill(const Operand& o) {
    const int32_t r = fill(o.scalar);
    p_.steps.back().start_int = o.integer;
    return r;
  }
  int32_t iota(double start, double step) {
    const int32_t r = add(PointwiseKind::kIota, {}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd);
    p_.steps.back().start = start;
    p_.steps.back().step = step;
    return r;
  }
  /// a's two halves along the output's last dim swapped, the new first half negated.
  int32_t rotate_half(int32_t a) {
    return add(PointwiseKind::kRotateHalf, {a}, hw::UnaryFn::kCopy, hw::BinaryFn::kAdd);
  }
  /// The compute type, inputs and steps so far.
  hw::DType compute() const { return p_.compute; }
  const std::vector<Operand>& inputs() const { return p_.inputs; }
  const std::vector<Step>& steps() const { return p_.steps; }
  /// The op writing the last step's result to view `out`.
  Pointwise done(uint32_t out) {
    p_.out = out;
    return p_;
  }

 private:
  int32_t add(PointwiseKind kind, std::vector<int32_t> args, hw::UnaryFn u, hw::BinaryFn b) {
    Step s;
    s.kind = kind;
    s.unary = u;
    s.binary = b;
    s.args = std::move(args);
    p_.steps.push_back(std::move(s));
    return step_ref(static_cast<uint32_t>(p_.steps.size() - 1));
  }
  Pointwise p_;
};

/// out = f over `dims` of in; out has in's shape with the reduced dims of size 1 (keepdim form).
/// Sum, Prod, Max and Min accumulate in the compute type; ArgMax and ArgMin write int64.
struct Reduce {
  hw::ReduceFn fn = hw::ReduceFn::kSum;
  hw::DType compute = hw::DType::kF32;
  uint32_t in = 0;
  uint32_t out = 0;
  std::vector<int64_t> dims;
};

/// out = alpha * (a @ b) + beta * bias over the last two dims ([..., M, K] @ [..., K, N]), batched
/// over the leading dims, which broadcast (as do bias's dims). The PT array takes `compute` (f32, f16
/// or bf16) and accumulates in fp32; the epilogue runs in fp32 and rounds once into out.
/// An activation (kCopy: none) applies after the bias, and then a residual (a view of out's shape,
/// strides and type) is added to the result or multiplies it (residual_fn: kAdd or kMul; a gated
/// MLP's up projection times its gate): each to the value rounded into out's type first (as a
/// program that stored the product and applied them after would see it), each rounding again.
struct Matmul {
  uint32_t a = 0, b = 0, out = 0;
  int64_t bias = -1;  // a view index, or -1 for none
  double alpha = 1, beta = 1;
  hw::DType compute = hw::DType::kF32;
  hw::UnaryFn activation = hw::UnaryFn::kCopy;
  int64_t residual = -1;  // a view index, or -1 for none
  hw::BinaryFn residual_fn = hw::BinaryFn::kAdd;
};

/// Rows chosen by an index vector (indirect DMA). `table` is [B..., R, C...], `index` is int64
/// [B..., n] (its batch dims may broadcast) and `rows` is [B..., n, C...]; the trailing C dims are
/// contiguous in table and rows.
///   kGather:     rows[b, i] = table[b, index[b, i]]
///   kScatter:    table[b, index[b, i]] = rows[b, i]   (a row named twice gets its last value)
///   kScatterAdd: table[b, index[b, i]] += rows[b, i]  (in table's type; floats in index order)
///   kScatterMul: table[b, index[b, i]] *= rows[b, i]  (likewise)
///   kScatterMax, kScatterMin: table[b, index[b, i]] = max (min) of itself and rows[b, i] (NaN wins)
/// An index outside [0, R) faults the core (the launch fails; nothing is written).
struct Index {
  enum class Kind : uint8_t {
    kGather,
    kScatter,
    kScatterAdd,
    kScatterMul,
    kScatterMax,
    kScatterMin
  } kind = Kind::kGather;
  uint32_t table = 0, index = 0, rows = 0;
};

/// out = the inclusive scan (cumulative sum or product) of in along its last dim, in the compute
/// type; in and out have one shape, and their last dim is contiguous.
struct Scan {
  hw::ScanFn fn = hw::ScanFn::kSum;
  hw::DType compute = hw::DType::kF32;
  uint32_t in = 0, out = 0;
};

/// values, indices = each row of `in` along its last dim sorted (stable; NaN counts as largest),
/// and the positions the values came from (int64). in and values have one type; all three one shape.
struct Sort {
  uint32_t in = 0, values = 0, indices = 0;
  bool descending = false;
};

/// Scaled dot-product attention as one op (a fused kernel: the scores never leave the scratchpad).
/// q [B, H, L, D], k [B, Hkv, S, D] and v [B, Hkv, S, Dv] with H a multiple of Hkv (query head h
/// attends with key head h / (H / Hkv)), out [B, H, L, Dv], all of one float type with a contiguous
/// last dim.
///   out = softmax(scale * q k^T + mask) v, rows whose every key is masked giving zeros;
///   lse [B, H, L] (fp32, optional) = the log of each row's softmax denominator (-inf for those).
/// The mask is causal (key j masked for query i when j > i) or a bias broadcastable to
/// [B, H, L, S] with a contiguous last dim: bool (true keeps the key) or float (added), or none.
/// Scores, the softmax and the output's accumulation are fp32; the probabilities enter the second
/// product in the operands' type, before their normalization (which divides the output).
struct Attention {
  uint32_t q = 0, k = 0, v = 0, out = 0;
  int64_t lse = -1, bias = -1;  // view indices, or -1 for none
  bool causal = false;
  double scale = 1;
};
struct Op {
  enum class Family : uint8_t {
    kPointwise,
    kReduce,
    kMatmul,
    kIndex,
    kScan,
    kSort,
    kAttention
  } family = Family::kPointwise;
  Pointwise pointwise;
  Reduce reduce;
  Matmul matmul;
  Index index;
  Scan scan;
  Sort sort;
  Attention attention;
};

/// Views and the ops that read and write them, in program order. Ops run one after another,
/// each finishing on every core before the next starts.
struct Graph {
  std::vector<View> views;
  std::vector<Op> ops;
  uint32_t num_args = 0;  // argument slots the launch must fill
  /// What the graph computes, when its maker knows (an eager launch's ATen op: "native_layer_norm"):
  /// it leads the name of a program that starts with a pointwise op or a reduction, whose own name
  /// says only how it runs, and it is part of the signature, since the name is in the image.
  std::string title;

  uint32_t add_view(View v) {
    views.push_back(std::move(v));
    return static_cast<uint32_t>(views.size() - 1);
  }
  /// Bytes naming everything the program depends on (shapes, strides, types, ops, but not
  /// addresses): the key of the program cache. Not text: it is built on every eager launch.
  std::string signature() const;
  /// A short human-readable name for traces, e.g. "mm f32 64x32x16", "add (pointwise f32 [64,64])".
  std::string name() const;
  /// Op i alone, as name() would call a graph of it: "mm f16 64x32x16", "reduce f32 [64,1]".
  std::string op_name(size_t i) const;
};

/// A graph from its JSON form (the torch.compile front door's): {"num_args": n, "views": [{"arg",
/// "offset", "sizes", "strides", "dtype"}], "ops": [{"pointwise": {"compute", "inputs": [{"view": i}
/// or {"scalar": x}], "out", "steps": [{"kind": "copy"|"unary"|"binary"|"select"|"fill"|"iota"|"round"|"rotate_half",
/// "fn", "args", "value", "start", "step", "to"}]}} | {"reduce": {"fn", "compute", "in", "out", "dims"}} |
/// {"matmul": {"a", "b", "out", "bias", "alpha", "beta", "compute"}} | {"index": {"kind" (0 gather,
/// 1 scatter, 2 scatter-add, 3 scatter-mul), "table", "index", "rows"}} | {"scan": {"fn", "compute",
/// "in", "out"}} | {"sort": {"in", "values", "indices", "descending"}}]}; steps may also be "fma". Functions are the hw
/// enum values; dtypes their names ("f32"); infinities and NaN the strings "inf", "-inf", "nan". Throws
/// Malformed naming the first malformed field.
Graph graph_from_json(std::string_view text);
/// The JSON form of a graph (what graph_from_json reads; also "scan", "sort" and "fma" steps).
std::string graph_to_json(const Graph& g);

}  // namespace spyre::compiler::ir
