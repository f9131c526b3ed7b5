// The compiler's tensor IR: a graph of operations on strided, typed views of device buffers.
// Eager ops hand the compiler a one-op graph; torch.compile will hand it whole graphs. No torch:
// the front doors translate their tensors into these views.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
};

/// An input of a pointwise op: a view (broadcast to the output's shape, aligned at the right as in
/// NumPy), or a scalar constant.
struct Operand {
  enum class Kind : uint8_t { kView, kScalar } kind = Kind::kView;
  uint32_t view = 0;  // index into Graph::views
  double scalar = 0;

  static Operand of(uint32_t v) { return {Kind::kView, v, 0}; }
  static Operand constant(double x) { return {Kind::kScalar, 0, x}; }
};

/// What a pointwise op computes, element by element, in its compute type.
enum class PointwiseKind : uint8_t {
  kCopy,    // out = in0 (with conversion from in0's type to out's)
  kUnary,   // out = unary(in0)
  kBinary,  // out = binary(in0, in1)
  kSelect,  // out = in0 ? in1 : in2 (in0 is bool)
  kFma,     // out = in0 * in1 + in2
  kFill,    // out = scalar (no inputs)
  kIota,    // out[i] = start + i * step over the output's elements in row-major order (1-D output)
};

struct Pointwise {
  PointwiseKind kind = PointwiseKind::kCopy;
  hw::UnaryFn unary = hw::UnaryFn::kCopy;
  hw::BinaryFn binary = hw::BinaryFn::kAdd;
  hw::DType compute = hw::DType::kF32;  // inputs convert to it, the result converts to the output's type
  std::vector<Operand> inputs;
  uint32_t out = 0;
  double start = 0, step = 1;  // kFill uses start as the value; kIota both
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
struct Matmul {
  uint32_t a = 0, b = 0, out = 0;
  int64_t bias = -1;  // a view index, or -1 for none
  double alpha = 1, beta = 1;
  hw::DType compute = hw::DType::kF32;
};

struct Op {
  enum class Family : uint8_t { kPointwise, kReduce, kMatmul } family = Family::kPointwise;
  Pointwise pointwise;
  Reduce reduce;
  Matmul matmul;
};

/// Views and the ops that read and write them, in program order. Ops run one after another,
/// each finishing on every core before the next starts.
struct Graph {
  std::vector<View> views;
  std::vector<Op> ops;
  uint32_t num_args = 0;  // argument slots the launch must fill

  uint32_t add_view(View v) {
    views.push_back(std::move(v));
    return static_cast<uint32_t>(views.size() - 1);
  }
  /// A stable text naming everything the program depends on (shapes, strides, types, ops, but not
  /// addresses): the key of the program cache.
  std::string signature() const;
  /// A short human-readable name for traces, e.g. "add f32 [64,64]".
  std::string name() const;
};

}  // namespace spyre::compiler::ir
