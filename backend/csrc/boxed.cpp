#include "boxed.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <deque>
#include <mutex>
#include <set>

#include "aten_util.h"

namespace spyre::backend {

BoxedCall::BoxedCall(const c10::OperatorHandle& op, torch::jit::Stack* stack)
    : op_(op), stack_(stack), n_(op.schema().arguments().size()) {
  std::string name = op.schema().name();
  if (const auto colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  // add_, _index_put_impl_ and _foreach_add_ write their first argument; __and__ is not in-place.
  inplace_ = name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_';
  if (inplace_) name.pop_back();
  base_ = std::move(name);
}

const c10::IValue* BoxedCall::get(std::string_view name) const {
  const auto& args = op_.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() == name) {
      const c10::IValue& v = at(i);
      // Autograd passes an absent optional tensor as an undefined one.
      return v.isNone() || (v.isTensor() && !v.toTensor().defined()) ? nullptr : &v;
    }
  }
  return nullptr;
}

bool BoxedCall::is_out(size_t i) const {
  const c10::Argument& a = op_.schema().arguments().at(i);
  return a.kwarg_only() && a.alias_info() && a.alias_info()->isWrite();
}

std::optional<at::Tensor> BoxedCall::out() const {
  for (size_t i = 0; i < n_; ++i) {
    if (!is_out(i)) continue;
    const c10::IValue& v = at(i);
    if (!v.isTensor() || !v.toTensor().defined()) return std::nullopt;
    return v.toTensor();
  }
  return std::nullopt;
}

at::Tensor BoxedCall::out_or(c10::IntArrayRef sizes, const std::function<at::Tensor()>& fresh) const {
  std::optional<at::Tensor> o = out();
  if (!o) return fresh();
  at::native::resize_output(*o, sizes);
  return *o;
}

void BoxedCall::finish(const at::Tensor& result) {
  torch::jit::drop(*stack_, n_);
  torch::jit::push(*stack_, result);
}

void BoxedCall::finish(std::initializer_list<at::Tensor> results) {
  torch::jit::drop(*stack_, n_);
  for (const at::Tensor& t : results) torch::jit::push(*stack_, t);
}

void BoxedCall::finish(std::initializer_list<c10::IValue> results) {
  torch::jit::drop(*stack_, n_);
  for (const c10::IValue& v : results) torch::jit::push(*stack_, v);
}

void BoxedCall::fall_back() {
  run_on_cpu(op_, stack_);
}

namespace {

// An argument as torch's meta kernels see it: spyre tensors become meta tensors of the same sizes,
// strides and dtype (0-dim host tensors stay, as the wrapped numbers they are).
c10::IValue to_meta(const c10::IValue& v) {
  const auto meta = [](const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone()) return t;
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  if (v.isTensor()) return meta(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(meta(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
      out.push_back(t ? std::optional<at::Tensor>(meta(*t)) : std::nullopt);
    }
    return out;
  }
  return v;
}

// An out= call gets torch's own checks before anything runs: the out= tensors must be spyre
// tensors, and the op's meta kernel (where it has one) decides whether their dtypes and shapes
// are acceptable, so that an out= CPU rejects (an unsafe cast, a wrong index dtype) is rejected
// here too, with CPU's message, instead of being written.
void check_out_call(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  const size_t n = args.size();
  bool has_out = false;
  for (size_t i = 0; i < n; ++i) {
    const c10::Argument& a = args[i];
    if (!(a.kwarg_only() && a.alias_info() && a.alias_info()->isWrite())) continue;
    has_out = true;
    const c10::IValue& v = stack[stack.size() - n + i];
    if (v.isTensor() && v.toTensor().defined()) {
      TORCH_CHECK(v.toTensor().is_privateuseone(),
                  "Expected all tensors to be on the same device, but found at "
                  "least two devices, spyre:0 and ",
                  v.toTensor().device(), "! (the out= argument '", a.name(), "' of ", op.schema().name(), ")");
    }
  }
  if (!has_out) return;
  torch::jit::Stack meta;
  for (size_t i = 0; i < n; ++i) meta.push_back(to_meta(stack[stack.size() - n + i]));
  try {
    op.callBoxed(&meta);
  } catch (const c10::NotImplementedError&) {
    // deliberately empty: the op has no meta kernel, and the device kernel checks what it can
  }
}

// A boxed kernel chosen at run time (torch's makeFromBoxedFunction wants it at compile time).
struct Functor final : c10::OperatorKernel {
  explicit Functor(BoxedKernel* k) : kernel(k) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    check_out_call(op, *stack);
    kernel(op, stack);
  }
  BoxedKernel* kernel;
};

}  // namespace

std::vector<std::string>& unknown_names() {
  static std::vector<std::string> names;
  return names;
}

void register_boxed(const std::vector<std::string>& names, const std::vector<std::string>& overloads,
                    BoxedKernel* kernel) {
  // Libraries must outlive the registrations they hold.
  static std::mutex mu;
  static std::deque<torch::Library> libs;
  const std::lock_guard lock(mu);
  auto& lib = libs.emplace_back(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  std::vector<std::string> missing;
  std::set<std::string> present;
  for (const std::string& name : names) {
    bool found = false;
    for (const std::string& overload : overloads) {
      if (!c10::Dispatcher::singleton().findSchema({"aten::" + name, overload})) continue;
      found = true;
      std::string full = name;
      if (!overload.empty()) full.append(".").append(overload);
      lib.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Functor>(kernel)));
    }
    if (found) {
      present.insert(name);
    } else {
      missing.push_back(name);
    }
  }
  // with_inplace's names: an op without an in-place form (isnan) is fine.
  for (const std::string& name : missing) {
    const bool inplace_of_present =
        name.size() > 1 && name.back() == '_' && present.count(name.substr(0, name.size() - 1));
    if (!inplace_of_present) unknown_names().push_back(name);
  }
}

std::vector<std::string> with_inplace(const std::vector<std::string>& names) {
  std::vector<std::string> all;
  for (const std::string& n : names) {
    all.push_back(n);
    all.push_back(n + "_");
  }
  return all;
}

}  // namespace spyre::backend
