// Random numbers on the device: a counter-based generator per device (seed and offset, as CUDA's
// Philox generator keeps them), and the kernels that draw from it: uniform_, normal_, bernoulli_,
// random_ and native_dropout (and through them rand, randn, randint, dropout). The numbers are
// drawn by the cores (the SFP's RANDOM instruction, Philox4x32-10), so the same seed gives the same
// tensors on every run and every config; they are not CPU torch's numbers for that seed.
#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/GeneratorImpl.h>
#include <torch/library.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <random>

#include "boxed.h"
#include "compute.h"
#include "runtime.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;

class SpyreGenerator final : public c10::GeneratorImpl {
 public:
  explicit SpyreGenerator(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    set_current_seed(std::random_device{}() | uint64_t{std::random_device{}()} << 32);
    return seed_;
  }
  // The state is the seed and the offset, as 16 bytes.
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.numel() == 16 && state.dtype() == at::kByte, "spyre: an RNG state is 16 bytes");
    const auto* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor t = at::empty({16}, at::kByte);
    std::memcpy(t.data_ptr(), &seed_, 8);
    std::memcpy(static_cast<uint8_t*>(t.data_ptr()) + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  /// Reserves `count` numbers: returns the counter of the first.
  uint64_t take(uint64_t count) {
    const uint64_t first = offset_;
    offset_ += (count + 3) / 4 * 4;
    return first;
  }

 private:
  SpyreGenerator* clone_impl() const override {
    auto* g = new SpyreGenerator(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_ = 67280421310721ull;  // CUDA's default seed
  uint64_t offset_ = 0;
};

// The generator a call names, or the device's default one.
SpyreGenerator& generator_of(const BoxedCall& c, const at::Tensor& like) {
  if (const c10::IValue* g = c.get("generator"); g && !g->isNone()) {
    at::Generator gen = g->toGenerator();
    TORCH_CHECK(gen.device().is_privateuseone(), "spyre: expected a spyre generator, got one for ", gen.device());
    return *gen.get<SpyreGenerator>();
  }
  return *at::detail::getPrivateUse1Hooks().getDefaultGenerator(like.device().index()).get<SpyreGenerator>();
}

// Draws numel(self) numbers into self through `finish(expr, random_ref)`: uniform or normal.
// False when the call went to the CPU fallback instead.
template <typename Build>
bool draw(BoxedCall& c, const at::Tensor& self, bool normal, Build build, bool integers = false) {
  const at::ScalarType t = self.scalar_type();
  if (!(at::isFloatingType(t) || (integers && at::isIntegralType(t, true))) || !device_dtype(t)) {
    c.fall_back();
    return false;
  }
  if (self.numel() == 0) {
    c.finish(self);
    return true;
  }
  SpyreGenerator& gen = generator_of(c, self);
  uint64_t key = 0, counter = 0;
  {
    std::lock_guard lock(gen.mutex_);
    key = gen.current_seed();
    counter = gen.take(static_cast<uint64_t>(self.numel()));
  }
  const at::Tensor out = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
  Launch l;
  ir::Step r;
  r.kind = ir::PointwiseKind::kRandom;
  r.start = normal ? 1 : 0;
  ir::Pointwise p;
  p.compute = hw::DType::kF32;
  p.steps.push_back(r);
  p.rng_arg = static_cast<int32_t>(l.scalar_arg(key));
  l.scalar_arg(counter);
  build(p, ir::step_ref(0));
  p.out = l.view(out.view({-1}));
  l.add(p);
  if (!run_or_fall_back(l, c)) return false;
  if (!out.is_same(self)) self.copy_(out);
  c.finish(self);
  return true;
}

// Appends step `s` to p and returns its reference.
int32_t append(ir::Pointwise& p, ir::Step s) {
  p.steps.push_back(std::move(s));
  return ir::step_ref(static_cast<uint32_t>(p.steps.size() - 1));
}
int32_t constant(ir::Pointwise& p, double x) {
  p.inputs.push_back(ir::Operand::constant(x));
  return static_cast<int32_t>(p.inputs.size() - 1);
}
int32_t binary(ir::Pointwise& p, BinaryFn f, int32_t a, int32_t b) {
  ir::Step s;
  s.kind = ir::PointwiseKind::kBinary;
  s.binary = f;
  s.args = {a, b};
  return append(p, s);
}

// uniform_(self, from, to): from + (to - from) * u, with u keeping only as many random bits as
// self's type has significand digits (11 for fp16, 10 for fp16 on a DLFloat16 card, 8 for bf16,
// 24 for fp32), as torch does: a 24-bit u just below 1 would round up to exactly 1 in fp16 or bf16.
void uniform_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const double from = c.at(1).toDouble(), to = c.at(2).toDouble();
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  const at::ScalarType t = self.scalar_type();
  const bool dlfloat = t == at::kHalf && DeviceRuntime::get(self.device().index()).device().info().fp16_dlfloat;
  const int digits = t == at::kHalf ? (dlfloat ? 10 : 11) : t == at::kBFloat16 ? 8 : 24;
  draw(c, self, false, [&](ir::Pointwise& p, int32_t u) {
    if (digits < 24) {
      ir::Step floor;
      floor.kind = ir::PointwiseKind::kUnary;
      floor.unary = hw::UnaryFn::kFloor;
      floor.args = {binary(p, BinaryFn::kMul, u, constant(p, std::ldexp(1.0, digits)))};
      u = binary(p, BinaryFn::kMul, append(p, floor), constant(p, std::ldexp(1.0, -digits)));
    }
    binary(p, BinaryFn::kAdd, binary(p, BinaryFn::kMul, u, constant(p, to - from)), constant(p, from));
  });
}

// random_(self[, from][, to]) (and so randint): integers uniform in [from, to), floor(u * (to - from))
// over the 24 bits u holds, plus from; without `to`, up to torch's bound for the type: [0, 2^digits]
// of a float type (every integer it holds exactly), [0, max] of an integer one. A range wider than
// 2^24 (random_() of int32, int64 or float32), bounds outside the type (CPU raises), types the card
// does not hold (uint8, int16) and float ends beyond 2^24 take the CPU fallback.
void random_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const at::ScalarType t = self.scalar_type();
  int64_t low = 0, high = 0;  // what the type holds (of a float type: exactly, as integers)
  switch (t) {
    case at::kBool:
      high = 1;
      break;
    case at::kChar:
      low = -128, high = 127;
      break;
    case at::kInt:
      low = INT32_MIN, high = INT32_MAX;
      break;
    case at::kLong:
      low = INT64_MIN, high = INT64_MAX;
      break;
    case at::kHalf:
      low = -(1 << 11), high = 1 << 11;
      break;
    case at::kBFloat16:
      low = -(1 << 8), high = 1 << 8;
      break;
    case at::kFloat:
      low = -(1 << 24), high = 1 << 24;
      break;
    default:
      return c.fall_back();
  }
  int64_t from = 0;
  std::optional<int64_t> to;  // none: up to `high`, inclusive
  if (c.overload() == "from") {
    from = c.at(1).toInt();
    if (!c.at(2).isNone()) to = c.at(2).toInt();
  } else if (c.overload() == "to") {
    to = c.at(1).toInt();
  }
  TORCH_CHECK(!to || from < *to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", *to);
  const int64_t last = to ? *to - 1 : high;
  const uint64_t span = static_cast<uint64_t>(last) - static_cast<uint64_t>(from);  // range - 1, no overflow
  constexpr int64_t kExact = int64_t{1} << 24;                                      // fp32 holds every integer below
  const bool in_fp32 = from > -kExact && from < kExact && last > -kExact && last < kExact;
  if (from < low || last > high || span >= (uint64_t{1} << 24) || (!at::isIntegralType(t, true) && !in_fp32)) {
    return c.fall_back();
  }
  const double range = static_cast<double>(span + 1);
  // Small ends are added in fp32; others (int64's) afterwards in the tensor's own type.
  const bool drawn = draw(
      c, self, false,
      [&](ir::Pointwise& p, int32_t u) {
        ir::Step floor;
        floor.kind = ir::PointwiseKind::kUnary;
        floor.unary = hw::UnaryFn::kFloor;
        floor.args = {binary(p, BinaryFn::kMul, u, constant(p, range))};
        // u * range rounded to fp32 may reach range itself.
        const int32_t k = binary(p, BinaryFn::kMin, append(p, floor), constant(p, range - 1));
        if (in_fp32) binary(p, BinaryFn::kAdd, k, constant(p, static_cast<double>(from)));
      },
      true);
  if (drawn && !in_fp32 && from != 0) self.add_(from);
}

// normal_(self, mean, std): mean + std * n.
void normal_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const double mean = c.at(1).toDouble(), std = c.at(2).toDouble();
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  draw(c, self, true, [&](ir::Pointwise& p, int32_t n) {
    binary(p, BinaryFn::kAdd, binary(p, BinaryFn::kMul, n, constant(p, std)), constant(p, mean));
  });
}

// bernoulli_(self, p): 1 where u < p.
void bernoulli_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const double prob = c.at(1).toDouble();
  TORCH_CHECK(prob >= 0 && prob <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", prob);
  draw(c, self, false, [&](ir::Pointwise& p, int32_t u) {
    ir::Step sel;
    sel.kind = ir::PointwiseKind::kSelect;
    sel.args = {binary(p, BinaryFn::kLt, u, constant(p, prob)), constant(p, 1.0), constant(p, 0.0)};
    append(p, sel);
  });
}

// native_dropout(input, p, train) -> (output, mask): mask = u >= p; output = input * mask / (1 - p).
void dropout_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor input = c.at(0).toTensor();
  const double p = c.at(1).toDouble();
  const c10::IValue* train = c.get("train");
  if (!at::isFloatingType(input.scalar_type()) || !device_dtype(input.scalar_type())) return c.fall_back();
  if ((train && !train->toBool()) || p == 0.0) {  // evaluation, or nothing dropped
    at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
    mask.fill_(true);
    return c.finish({input.clone(), mask});
  }
  at::Tensor keep = at::empty(input.sizes(), input.options());
  keep.bernoulli_(1.0 - p);
  at::Tensor mask = keep.to(at::kBool);
  at::Tensor output = p == 1.0 ? at::zeros_like(input) : input * keep * (1.0 / (1.0 - p));
  c.finish({output, mask});
}

const bool g_registered = [] {
  register_boxed({"uniform_"}, {""}, &uniform_kernel);
  register_boxed({"random_"}, {"", "from", "to"}, &random_kernel);
  register_boxed({"normal_"}, {""}, &normal_kernel);
  register_boxed({"bernoulli_"}, {"float"}, &bernoulli_kernel);
  register_boxed({"native_dropout"}, {""}, &dropout_kernel);
  return true;
}();

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex mu;
  static std::vector<at::Generator> generators;
  DeviceRuntime::check_index(index);
  const std::lock_guard lock(mu);
  if (generators.size() <= static_cast<size_t>(index)) generators.resize(static_cast<size_t>(index) + 1);
  if (!generators[static_cast<size_t>(index)].defined()) {
    generators[static_cast<size_t>(index)] = at::make_generator<SpyreGenerator>(index);
  }
  return generators[static_cast<size_t>(index)];
}

}  // namespace spyre::backend
