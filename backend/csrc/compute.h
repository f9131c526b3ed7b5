// The eager front door of the kernel compiler: turns ATen tensors into IR views, builds one-op
// graphs and launches them (compiled once per signature, then cached). Include only from ATen
// translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "boxed.h"
#include "spyre/compiler/ir.h"
#include "spyre/compiler/ops.h"

namespace spyre::backend {

namespace ir = compiler::ir;

/// The device element type of a torch dtype, or nullopt when the device does not compute in it
/// (such ops take the CPU fallback).
std::optional<hw::DType> device_dtype(c10::ScalarType t);
/// The same for a dtype the caller has already checked: a type the device lacks is an internal error.
hw::DType checked_device_dtype(c10::ScalarType t);

/// A graph being built for one launch: every tensor added becomes a launch argument (its first
/// element's address) and a view of it; the op library's temporaries share one more argument, a
/// block allocated when the launch runs.
class Launch final : public compiler::ops::Builder {
 public:
  Launch() : Builder(graph_) {}
  using Builder::view;
  /// Adds `t` (a spyre tensor) as a view; returns the view's index. Equal tensors share a view.
  /// The launch keeps `t` alive until it is queued: a temporary (a reshape that copied, a
  /// contiguous copy) must not free its memory before the program that reads it is queued, or
  /// the program's own upload could land in it.
  uint32_t view(const at::Tensor& t);
  /// Adds `t` viewed with other sizes and strides (elements), e.g. a broadcast or a permutation.
  uint32_t view(const at::Tensor& t, c10::IntArrayRef sizes, c10::IntArrayRef strides);
  /// The same, `offset` elements past `t`'s first: views of parts of one tensor share its argument.
  uint32_t view(const at::Tensor& t, int64_t offset, c10::IntArrayRef sizes, c10::IntArrayRef strides);
  /// A device temporary for this launch (fp32 unless told), alive until the launch is queued; the
  /// queue is in order, so work queued later that reuses its memory runs after this launch.
  at::Tensor scratch(c10::IntArrayRef sizes, const at::Tensor& like, at::ScalarType type = at::kFloat);
  /// The op library's temporaries: views of the launch's temp block.
  uint32_t temp(const std::vector<int64_t>& sizes, hw::DType dtype) override;
  /// Adds a 64-bit launch argument that is not a tensor (a random key or counter); its slot.
  uint32_t scalar_arg(uint64_t value) {
    args_.push_back(value);
    scalar_.resize(args_.size(), false);
    scalar_.back() = true;
    return static_cast<uint32_t>(args_.size() - 1);
  }
  /// Compiles (or finds in the cache) and queues the program on its device's queue, labelled with
  /// the ATen operator `op` in the trace. Throws std::invalid_argument when the compiler rejects
  /// the graph or it needs more than 16 launch arguments (callers fall back), c10::Error for
  /// device errors.
  void run(const std::string& op);

 private:
  ir::Graph graph_;
  std::vector<uint64_t> args_;
  std::vector<bool> scalar_;         // slots that hold no tensor's address, never shared with one
  std::vector<at::Tensor> scratch_;  // temporaries and every tensor a view names
  c10::DeviceIndex device_ = -1;
  int64_t temp_arg_ = -1;  // the slot of the temp block, once a temporary is asked for
  uint64_t temp_bytes_ = 0;
};

/// The op library's description of call `c`: its arguments by name (spyre tensors as views of
/// `l`, numbers and 0-dim host tensors as numbers, lists, strings), `outs` as its results' views
/// (undefined tensors: not wanted) and the types torch gives.
compiler::ops::Call library_call(const BoxedCall& c, Launch& l, const std::vector<at::Tensor>& outs,
                                 at::ScalarType common, at::ScalarType result);
/// Lowers `call` (the op library) into `l` and runs it, labelled with call `c`'s operator; false
/// when the library or the compiler does not take it (nothing ran).
bool try_lower(Launch& l, const compiler::ops::Call& call, const BoxedCall& c);
/// The same, running `c` on the CPU fallback when it is not taken: the stack then holds the
/// fallback's results and the caller returns at once.
bool lower_or_fall_back(Launch& l, const compiler::ops::Call& call, BoxedCall& c);

/// Adds to `l` the pointwise op that `build` makes over the views `inputs` (at most three; refs in
/// order), writing view `out`, computed in fp32 and rounded once into `out`'s type.
void expr(Launch& l, const std::vector<uint32_t>& inputs, uint32_t out,
          const std::function<void(ir::Expr&, const std::vector<int32_t>&)>& build);
/// Adds to `l` the reduction `fn` of view `in` over `dims` into view `out` (`in`'s shape with those
/// dims of size 1), accumulating in `compute`.
void reduce(Launch& l, hw::ReduceFn fn, uint32_t in, uint32_t out, std::vector<int64_t> dims,
            hw::DType compute = hw::DType::kF32);
/// The fp32 sum of view `in` over `dim` into view `out`.
inline void sum(Launch& l, uint32_t in, uint32_t out, int64_t dim) {
  reduce(l, hw::ReduceFn::kSum, in, out, {dim});
}

/// Runs `l`, labelled with the operator of call `c`; false when the compiler does not take the
/// graph (a shape or layout its lowerings do not cover), and nothing ran.
bool try_run(Launch& l, const BoxedCall& c);
/// Runs `l`, labelled with the operator of call `c`. When the compiler does not take the graph (a
/// shape or layout its lowerings do not cover), runs `c` on the CPU fallback instead and returns
/// false: the stack then holds the fallback's results and the caller returns at once.
bool run_or_fall_back(Launch& l, BoxedCall& c);

/// Copies `src` into `dst` on the device (same device): any strides, broadcasting `src` to `dst`'s
/// shape, converting dtype. False when a dtype is not a device type (the caller copies another way).
bool device_copy(const at::Tensor& dst, const at::Tensor& src);

}  // namespace spyre::backend
