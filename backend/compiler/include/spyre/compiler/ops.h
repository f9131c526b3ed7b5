// The op library: how each ATen operator becomes IR ops, written once for both front doors of the
// compiler. An eager kernel (backend/csrc) describes its call with views of its tensors; the
// torch.compile planner (backend/torch_spyre/_compile) describes the nodes of a segment in JSON
// (segment_from_json). Both get their IR from the same lowering here, so the two cannot drift.
//
// No torch: a front door brings what torch decides (the shapes and types of the results, the
// promoted type of the inputs) with the call, and checks what torch checks before it gets here.
// A lowering that does not take a call throws compiler::Unsupported; the front door then takes
// another path (the CPU fallback, or the op run eagerly). A malformed call or segment throws
// compiler::Malformed, which no front door falls back from (spyre/compiler/errors.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spyre/compiler/ir.h"

namespace spyre::compiler::ops {

struct Call;

/// One argument of a call, as ATen's schema names it.
struct Arg {
  enum class Kind : uint8_t { kNone, kTensor, kNumber, kBool, kString, kInts, kTensors, kExpr };
  Kind kind = Kind::kNone;
  uint32_t view = 0;  // kTensor: a view of the builder's graph
  // kTensor: the tensor the op was given has one element (the view may broadcast it), an operand
  // CPU's iterator reads as a scalar. An expanded tensor is not one: CPU converts it as it is.
  bool one_element = false;
  double number = 0;                 // kNumber: a Python number or a 0-dim host tensor
  bool integral = false;             // kNumber: an integer (Python int)
  int64_t integer = 0;               // kNumber, integral: the value exactly
  bool flag = false;                 // kBool
  std::string text;                  // kString
  std::vector<int64_t> ints;         // kInts
  std::vector<uint32_t> views;       // kTensors
  std::shared_ptr<const Call> expr;  // kExpr: a pointwise call whose value this is (fused, never stored)

  static Arg tensor(uint32_t v, bool one_element = false);
  static Arg num(double x, bool integral = false);
  static Arg whole(int64_t x);  // an integer, exactly
  static Arg boolean(bool b);
  static Arg string(std::string s);
  static Arg list(std::vector<int64_t> v);
  static Arg tensors(std::vector<uint32_t> v);
  static Arg fused(std::shared_ptr<const Call> c);
};

/// One ATen call: the op, its arguments by name, where its results go, and the types torch gives.
struct Call {
  std::string op;  // ATen's base name: "add" for add.Tensor, add_ and add.out; "prims::var" for prims
  std::map<std::string, Arg, std::less<>> args;
  std::vector<int64_t> outs;           // the results' views in schema order; -1 for one not wanted
  hw::DType common = hw::DType::kF32;  // the promoted type of the inputs (torch.result_type)
  hw::DType result = hw::DType::kF32;  // the type of the first result

  /// The argument `name`, or nullptr when the call has none or it is None.
  const Arg* get(std::string_view name) const;
  /// The view of tensor argument `name`. Throws Unsupported when it is not a tensor.
  uint32_t tensor(std::string_view name) const;
  double number(std::string_view name, double fallback) const;
  int64_t integer(std::string_view name, int64_t fallback) const;
  bool flag(std::string_view name, bool fallback) const;
  std::string text(std::string_view name, std::string fallback = "") const;
  /// Result `i`'s view. Throws Unsupported when the call has none there.
  uint32_t out(size_t i = 0) const;
  bool wants(size_t i) const { return i < outs.size() && outs[i] >= 0; }
};

/// Where lowerings put what they build: a graph, and temporaries the launch owns.
class Builder {
 public:
  explicit Builder(ir::Graph& g) : g_(g) {}
  virtual ~Builder() = default;
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  ir::Graph& graph() { return g_; }
  const ir::View& view(uint32_t v) const { return g_.views.at(v); }
  /// A view of the memory of view `of`: `offset` elements further in, with other sizes and strides
  /// (elements of the same type). Equal views are shared.
  uint32_t derive(uint32_t of, int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides);
  uint32_t derive(uint32_t of, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
    return derive(of, 0, std::move(sizes), std::move(strides));
  }
  /// A new contiguous temporary of `sizes` in `dtype`, private to this launch; its view.
  virtual uint32_t temp(const std::vector<int64_t>& sizes, hw::DType dtype) = 0;

  void add(ir::Pointwise p);
  void add(ir::Reduce r);
  void add(ir::Matmul m);
  void add(ir::Index x);
  void add(ir::Scan s);
  void add(ir::Sort s);
  void add(ir::Attention a);

 protected:
  uint32_t add_view(ir::View v);
  ir::Graph& g_;
};

// ---- pointwise ops -------------------------------------------------------------------------------

/// How torch types a pointwise op's result (the eager front door applies it; torch.compile's graphs
/// carry the result types), and so what the op computes in.
enum class Types : uint8_t {
  kPromote,    // the inputs' promoted type (add, mul, where, clamp, copies)
  kToFloat,    // the promoted type; integers give the default float type (exp, sqrt, atan2)
  kTrueDiv,    // div: kToFloat, but kPromote with a rounding mode
  kToBool,     // bool, computed in the promoted type (comparisons, logical ops, isnan, isinf)
  kIntegral,   // the promoted type, which must be integral or bool (bitwise ops)
  kFloatOnly,  // the promoted type; computed in fp32 when that is integral (activation backwards)
  kSelf,       // the type of `self` (masked_fill)
};

/// The value of one element, built from the refs of the op's inputs; returns the last step's ref.
using Build = std::function<int32_t(ir::Expr&, const std::vector<int32_t>&, const Call&)>;

/// A pointwise op: one expression over its inputs, which fuses with its neighbours' expressions.
struct PointwiseOp {
  std::vector<std::string> inputs;    // the arguments it reads, tensors or numbers, in order
  std::vector<std::string> promoted;  // those whose promoted type is the call's common type
  Types types = Types::kPromote;
  Build build;
  // The inputs whose numbers stay exact in an fp16 or bf16 call, as torch's kernels keep them (the
  // second operand of mul, div and floor_divide, pow's exponent, lerp's weight); the call then
  // computes in fp32 and rounds once. Other number operands round to the common type first, as
  // torch's iterator casts them (add's and sub's included).
  std::vector<std::string> exact_numbers;
};

/// The pointwise op named `op`, or nullptr.
const PointwiseOp* pointwise_op(std::string_view op);
/// What a pointwise call computes in (its expression's compute type).
hw::DType compute_type(const PointwiseOp& p, const Call& c);

// ---- every op ------------------------------------------------------------------------------------

/// How the library takes an op: not at all, as a pointwise op (fusable) or as an op of its own.
enum class Kind : uint8_t { kNone, kPointwise, kOp };
Kind kind(std::string_view op);
/// What the planner knows of an op the library lowers: its kind, its family ("pointwise",
/// "reduce", "matmul", "index", "movement", "attention") and how many of its leading results the
/// lowering writes (the rest of a tuple result are numbers or tensors nobody reads).
struct Entry {
  Kind kind = Kind::kNone;
  std::string family;
  uint32_t results = 1;
};
/// Every op the library lowers (for the planner, through torch_spyre._C).
std::map<std::string, Entry> catalogue();

/// Appends the IR of call `c` to `b`. Throws Unsupported when the library does not take it
/// (an op it does not know, an argument it does not model, a layout no lowering covers).
void lower(Builder& b, const Call& c);

// ---- the torch.compile front door ----------------------------------------------------------------

/// A segment of the planner in JSON into a graph: {"num_args": n, "views": [as ir::graph_from_json],
/// "nodes": [call]}, a call being {"op": name, "args": {name: arg}, "outs": [view or -1], "common",
/// "result" (dtype names), "temp": {"arg": slot, "offset": bytes, "bytes": size}}. An argument is null, a number,
/// a bool, a string, a list of ints, {"view": i}, {"views": [i, ...]}, {"float": "inf" | "-inf" |
/// "nan"}, or {"node": call} (a fused pointwise producer). A node's temporaries go in order into
/// its temp region. Throws Malformed naming the first malformed field, or Unsupported naming the
/// call a lowering does not take.
ir::Graph segment_from_json(std::string_view text);
/// What the planner needs to know of a node before it places memory: the bytes of temporaries its
/// lowering asks for (the temp region it must give the node) and, for a pointwise op, the type its
/// expression computes in (only expressions of one compute type fuse).
struct NodeInfo {
  uint64_t temp_bytes = 0;
  std::optional<hw::DType> compute;
  std::vector<uint32_t> args;  // the launch arguments its ops touch (what it reads among them)
};
/// NodeInfo of each node of a segment (its "temp" fields are ignored; it may name more arguments
/// than a launch has, one per operand, so that `args` tells the operands apart). Throws as
/// segment_from_json.
std::vector<NodeInfo> examine(std::string_view text);
/// Temporaries start at multiples of this many bytes.
inline constexpr uint64_t kTempAlign = 64;

}  // namespace spyre::compiler::ops
