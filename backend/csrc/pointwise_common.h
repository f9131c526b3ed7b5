// What the elementwise ATen kernels share: operands as ATen passes them (spyre tensors, Python
// numbers, 0-dim CPU tensors), torch's type promotion over them, and where a result goes
// (functional, in-place or out=). Include only from ATen translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {

/// An operand: a spyre tensor, or a scalar (a Python number, or a 0-dim CPU tensor, kept in `host`:
/// it promotes as the 0-dim tensor it is, not as a Python number).
struct Value {
  std::optional<at::Tensor> tensor;
  c10::Scalar scalar;
  std::optional<at::Tensor> host;
};

/// Throws torch's device-mismatch error for a CPU tensor of more than 0 dims.
Value value_of(const c10::IValue& v);
/// Raises what CPU torch raises for this call's argument types (a dtype its kernel does not have,
/// an alpha it refuses): the call runs once on the CPU on empty stand-ins of its arguments (0-dim
/// ones keep one element), and the answer is kept per operator and argument types.
void check_types_as_cpu(const BoxedCall& c);
/// at::result_type over two operands.
at::ScalarType promote(const Value& a, const Value& b);
/// True when the device computes in every type given.
bool on_device(std::initializer_list<at::ScalarType> types);
/// The broadcast shape of the tensor operands.
std::vector<int64_t> broadcast_shape(const std::vector<const Value*>& values);
/// Whether two elements of t may share memory (a sufficient test: false means they cannot).
bool may_share(const at::Tensor& t);
/// Whether elements of `out` share memory where torch's own check cannot see it (an unfolded view
/// of overlapping windows). A view too large to list its elements' offsets counts as shared.
bool has_hidden_internal_overlap(const at::Tensor& out);
/// Raises torch's overlap error for such an output: CPU writes it in its loop order, the device
/// tile by tile, so no answer would agree.
void assert_no_hidden_internal_overlap(const at::Tensor& out);
/// Where a result goes: a new tensor like `like` (functional), the first argument (in-place) or
/// out= (resized), with torch's checks (shape, cast, overlap). Nullopt when the output's dtype is
/// not a device type (the caller falls back). `converted[i]` says that CPU's iterator converts
/// inputs[i] to its common type before it lays the result out (the copy's strides then count).
std::optional<at::Tensor> output(const BoxedCall& c, const at::Tensor& like, c10::IntArrayRef shape,
                                 at::ScalarType result, const std::vector<const Value*>& inputs,
                                 const std::vector<bool>& converted);

}  // namespace spyre::backend
