// Reading the arguments of a boxed ATen call by name, for the table-driven kernels: one kernel
// serves every variant of an op (functional, in-place, out=) and every op of a family.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spyre::backend {

class BoxedCall {
 public:
  BoxedCall(const c10::OperatorHandle& op, torch::jit::Stack* stack);

  /// The op's base name without namespace, overload or trailing underscore: "add" for add_.Tensor.
  const std::string& base() const { return base_; }
  const std::string& overload() const { return op_.schema().overload_name(); }
  /// "aten::add_.Tensor": how traces and messages name the call.
  std::string name() const {
    std::string n = op_.schema().name();
    if (!overload().empty()) n += '.' + overload();
    return n;
  }
  /// True for the in-place variant (add_), which writes its first argument.
  bool inplace() const { return inplace_; }
  /// The out= tensor, if this is an out variant (the first keyword-only argument it writes, whatever
  /// its name: out, grad_input, ...).
  std::optional<at::Tensor> out() const;
  /// Where a result of shape `sizes` goes: the out= tensor, resized as torch's out= variants
  /// resize, or else `fresh()`.
  at::Tensor out_or(c10::IntArrayRef sizes, const std::function<at::Tensor()>& fresh) const;
  /// True when argument `i` is an out= argument.
  bool is_out(size_t i) const;
  const c10::FunctionSchema& schema() const { return op_.schema(); }
  const c10::OperatorHandle& op() const { return op_; }

  size_t size() const { return n_; }
  const c10::IValue& at(size_t i) const { return (*stack_)[stack_->size() - n_ + i]; }
  /// The argument named `name`, or nullptr when the schema has none (or it is None, or an
  /// undefined tensor).
  const c10::IValue* get(std::string_view name) const;
  /// The number argument `name` as a double, or `fallback` when the schema has no such argument.
  double scalar(std::string_view name, double fallback) const {
    const c10::IValue* v = get(name);
    return v ? v->toScalar().toDouble() : fallback;
  }

  /// Pops the arguments and pushes `result` as the return value.
  void finish(const at::Tensor& result);
  /// Pops the arguments and pushes several return values.
  void finish(std::initializer_list<at::Tensor> results);
  /// The same for return values that are not all tensors (a SymInt, say).
  void finish(std::initializer_list<c10::IValue> results);
  /// Runs the call through the CPU fallback instead (honouring TORCH_SPYRE_CPU_FALLBACK).
  void fall_back();

 private:
  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  size_t n_;
  std::string base_;
  bool inplace_;
};

using BoxedKernel = void(const c10::OperatorHandle&, torch::jit::Stack*);

/// Registers `kernel` for PrivateUse1 for each overload in `overloads` of each op in `names`,
/// skipping those torch does not have. `overloads` uses "" for the default overload. A name none
/// of whose overloads torch has (a typo, or an op torch renamed) is kept in unknown_names().
void register_boxed(const std::vector<std::string>& names, const std::vector<std::string>& overloads,
                    BoxedKernel* kernel);
/// The names register_boxed found no op for: the extension's import fails on any (module.cpp).
std::vector<std::string>& unknown_names();
/// The names and their in-place forms: {"add"} -> {"add", "add_"}.
std::vector<std::string> with_inplace(const std::vector<std::string>& names);

}  // namespace spyre::backend
