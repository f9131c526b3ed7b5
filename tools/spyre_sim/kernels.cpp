#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace spyre::simtool {
namespace {

namespace ir = compiler::ir;
using hw::BinaryFn;
using hw::DType;
using hw::UnaryFn;
using Role = Buffer::Role;

// Adds a buffer; its index is also its launch argument slot.
uint32_t add_buffer(Kernel& k, std::string name, DType type, uint64_t numel, Role role) {
  Buffer b;
  b.name = std::move(name);
  b.dtype = type;
  b.numel = numel;
  b.role = role;
  k.buffers.push_back(std::move(b));
  k.args.push_back(static_cast<uint32_t>(k.buffers.size() - 1));
  return k.args.back();
}

// `n` values uniform in [lo, hi), rounded to `type` as the card stores it; none when the run
// computes no values.
std::vector<float> random_values(std::mt19937_64& rng, uint64_t n, float lo, float hi, DType type,
                                 const BuildEnv& env) {
  if (!env.values) return {};
  const Formats& f = env.formats;
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(type, f, dist(rng));
  return v;
}

// A row-major view of launch argument `arg`.
ir::View contiguous(uint32_t arg, std::vector<int64_t> sizes, DType type) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  return ir::View{arg, 0, std::move(sizes), std::move(strides), type};
}

void add_pointwise(ir::Graph& g, ir::Pointwise p) {
  ir::Op op;
  op.family = ir::Op::Family::kPointwise;
  op.pointwise = std::move(p);
  g.ops.push_back(std::move(op));
}

// The fp32 expression `build` makes over views `inputs`, written to view `out`.
template <typename Build>
void add_expr(ir::Graph& g, const std::vector<uint32_t>& inputs, uint32_t out, Build build) {
  ir::Expr e(DType::kF32);
  std::vector<int32_t> refs;
  refs.reserve(inputs.size());
  for (uint32_t v : inputs) refs.push_back(e.input(ir::Operand::of(v)));
  build(e, refs);
  add_pointwise(g, e.done(out));
}

void add_reduce(ir::Graph& g, hw::ReduceFn fn, uint32_t in, uint32_t out, int64_t dim) {
  ir::Op op;
  op.family = ir::Op::Family::kReduce;
  op.reduce.fn = fn;
  op.reduce.compute = DType::kF32;
  op.reduce.in = in;
  op.reduce.out = out;
  op.reduce.dims = {dim};
  g.ops.push_back(std::move(op));
}

// One row per elementwise function: its SFP function, its cost class, and the input range that
// keeps it defined and well conditioned (the second input of a binary function has its own).
struct ElementwiseRow {
  const char* name;
  bool binary;
  UnaryFn unary;
  BinaryFn fn;
  bool transcendental;
  float lo, hi, lo2, hi2;
};

constexpr ElementwiseRow kElementwise[] = {
    {"add", true, UnaryFn::kCopy, BinaryFn::kAdd, false, -2, 2, -2, 2},
    {"sub", true, UnaryFn::kCopy, BinaryFn::kSub, false, -2, 2, -2, 2},
    {"mul", true, UnaryFn::kCopy, BinaryFn::kMul, false, -2, 2, -2, 2},
    {"div", true, UnaryFn::kCopy, BinaryFn::kDiv, true, -2, 2, 0.5f, 2},
    {"max", true, UnaryFn::kCopy, BinaryFn::kMax, false, -2, 2, -2, 2},
    {"min", true, UnaryFn::kCopy, BinaryFn::kMin, false, -2, 2, -2, 2},
    {"neg", false, UnaryFn::kNeg, BinaryFn::kAdd, false, -2, 2, 0, 0},
    {"abs", false, UnaryFn::kAbs, BinaryFn::kAdd, false, -2, 2, 0, 0},
    {"relu", false, UnaryFn::kRelu, BinaryFn::kAdd, false, -2, 2, 0, 0},
    {"exp", false, UnaryFn::kExp, BinaryFn::kAdd, true, -2, 2, 0, 0},
    {"log", false, UnaryFn::kLog, BinaryFn::kAdd, true, 0.25f, 4, 0, 0},
    {"sqrt", false, UnaryFn::kSqrt, BinaryFn::kAdd, true, 0.25f, 4, 0, 0},
    {"rsqrt", false, UnaryFn::kRsqrt, BinaryFn::kAdd, true, 0.25f, 4, 0, 0},
    {"tanh", false, UnaryFn::kTanh, BinaryFn::kAdd, true, -2, 2, 0, 0},
    {"sigmoid", false, UnaryFn::kSigmoid, BinaryFn::kAdd, true, -2, 2, 0, 0},
    {"silu", false, UnaryFn::kSilu, BinaryFn::kAdd, true, -2, 2, 0, 0},
    {"gelu", false, UnaryFn::kGeluErf, BinaryFn::kAdd, true, -2, 2, 0, 0},
    {"gelu_tanh", false, UnaryFn::kGeluTanh, BinaryFn::kAdd, true, -2, 2, 0, 0},
    {"sin", false, UnaryFn::kSin, BinaryFn::kAdd, true, -3, 3, 0, 0},
    {"cos", false, UnaryFn::kCos, BinaryFn::kAdd, true, -3, 3, 0, 0},
};

}  // namespace

double Work::flops() const {
  double f = matmul_flops;
  for (const VectorWork& v : vector) f += v.elements;
  return f;
}

std::string Kernel::title() const {
  std::string t = name;
  if (!op.empty()) t += " " + op;
  for (const auto& [key, value] : dims) t += fmt::format(" {}={}", key, value);
  return t + " " + hw::dtype_name(dtype);
}

Kernel make_gemm(const BuildEnv& env, uint32_t m, uint32_t k, uint32_t n, DType dtype) {
  Kernel kern;
  kern.name = "gemm";
  kern.dims = {{"m", m}, {"k", k}, {"n", n}};
  kern.dtype = dtype;
  std::mt19937_64 rng(env.seed);
  const uint32_t a = add_buffer(kern, "A", dtype, uint64_t{m} * k, Role::kInput);
  const uint32_t b = add_buffer(kern, "B", dtype, uint64_t{k} * n, Role::kInput);
  const uint32_t c = add_buffer(kern, "C", dtype, uint64_t{m} * n, Role::kOutput);
  kern.buffers[a].values = random_values(rng, kern.buffers[a].numel, -1, 1, dtype, env);
  kern.buffers[b].values = random_values(rng, kern.buffers[b].numel, -1, 1, dtype, env);
  kern.program = compiler::compile_matmul(compiler::MatmulSpec{m, k, n, dtype, dtype, k, n, n}, env.target);
  kern.work.matmul_flops = 2.0 * m * n * k;
  kern.work.matmul_dtype = dtype;
  kern.work.min_bytes = kern.buffers[a].bytes() + kern.buffers[b].bytes() + kern.buffers[c].bytes();
  kern.work.min_store_bytes = kern.buffers[c].bytes();
  kern.check_size = static_cast<double>(m) * k * n;
  const double u = unit_roundoff(dtype, env.formats);
  kern.golden = [=](const Kernel& kk) {
    Expected e = gemm_reference(kk.buffers[a].values, kk.buffers[b].values, m, k, n, u);
    e.buffer = c;
    return e;
  };
  return kern;
}

std::vector<std::string> elementwise_ops() {
  std::vector<std::string> names;
  for (const ElementwiseRow& r : kElementwise) names.emplace_back(r.name);
  return names;
}

Kernel make_elementwise(const BuildEnv& env, const std::string& op, uint64_t numel, DType dtype) {
  const ElementwiseRow* row = nullptr;
  for (const ElementwiseRow& r : kElementwise) {
    if (op == r.name) row = &r;
  }
  const ScalarFn fn = elementwise_function(op);
  if (!row || !fn) throw std::invalid_argument(fmt::format("elementwise: no function '{}'", op));
  Kernel kern;
  kern.name = "elementwise";
  kern.op = op;
  kern.dims = {{"numel", static_cast<int64_t>(numel)}};
  kern.dtype = dtype;
  std::mt19937_64 rng(env.seed);
  const int64_t n = static_cast<int64_t>(numel);
  ir::Graph g;
  const uint32_t a = add_buffer(kern, "a", dtype, numel, Role::kInput);
  kern.buffers[a].values = random_values(rng, numel, row->lo, row->hi, dtype, env);
  ir::Pointwise p;
  p.kind = row->binary ? ir::PointwiseKind::kBinary : ir::PointwiseKind::kUnary;
  p.unary = row->unary;
  p.binary = row->fn;
  p.compute = dtype;  // as the PyTorch device computes a pointwise op: in its result type
  p.inputs.push_back(ir::Operand::of(g.add_view(contiguous(a, {n}, dtype))));
  int64_t b = -1;
  if (row->binary) {
    b = add_buffer(kern, "b", dtype, numel, Role::kInput);
    kern.buffers[b].values = random_values(rng, numel, row->lo2, row->hi2, dtype, env);
    p.inputs.push_back(ir::Operand::of(g.add_view(contiguous(static_cast<uint32_t>(b), {n}, dtype))));
  }
  const uint32_t out = add_buffer(kern, "out", dtype, numel, Role::kOutput);
  p.out = g.add_view(contiguous(out, {n}, dtype));
  add_pointwise(g, std::move(p));
  g.num_args = static_cast<uint32_t>(kern.args.size());
  kern.program = compiler::compile(g, env.target);
  kern.work.vector = {{static_cast<double>(numel), dtype, row->transcendental}};
  kern.work.min_bytes = kern.buffers.size() * kern.buffers[out].bytes();
  kern.work.min_store_bytes = kern.buffers[out].bytes();
  kern.check_size = static_cast<double>(numel);
  const double u = unit_roundoff(dtype, env.formats);
  kern.golden = [=](const Kernel& kk) {
    Expected e =
        elementwise_reference(fn, kk.buffers[a].values, b < 0 ? std::vector<float>{} : kk.buffers[b].values, u);
    e.buffer = out;
    return e;
  };
  return kern;
}

Kernel make_layernorm(const BuildEnv& env, uint32_t rows, uint32_t cols, double eps, DType dtype) {
  Kernel kern;
  kern.name = "layernorm";
  kern.dims = {{"rows", rows}, {"cols", cols}};
  kern.dtype = dtype;
  std::mt19937_64 rng(env.seed);
  const int64_t R = rows, C = cols;
  const uint64_t numel = uint64_t{rows} * cols;
  const uint32_t x = add_buffer(kern, "x", dtype, numel, Role::kInput);
  const uint32_t out = add_buffer(kern, "out", dtype, numel, Role::kOutput);
  const uint32_t mean = add_buffer(kern, "mean", DType::kF32, rows, Role::kScratch);
  const uint32_t rstd = add_buffer(kern, "rstd", DType::kF32, rows, Role::kScratch);
  const uint32_t sq = add_buffer(kern, "squares", DType::kF32, numel, Role::kScratch);
  kern.buffers[x].values = random_values(rng, numel, -2, 2, dtype, env);

  // mean = sum(x) / C;  rstd = rsqrt(sum((x - mean)^2) / C + eps);  out = (x - mean) * rstd.
  ir::Graph g;
  const uint32_t xv = g.add_view(contiguous(x, {R, C}, dtype)), ov = g.add_view(contiguous(out, {R, C}, dtype));
  const uint32_t mv = g.add_view(contiguous(mean, {R, 1}, DType::kF32));
  const uint32_t sv = g.add_view(contiguous(rstd, {R, 1}, DType::kF32));
  const uint32_t qv = g.add_view(contiguous(sq, {R, C}, DType::kF32));
  const double inv = 1.0 / static_cast<double>(cols);
  add_reduce(g, hw::ReduceFn::kSum, xv, mv, 1);
  add_expr(g, {mv}, mv, [&](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, in[0], e.constant(inv)); });
  add_expr(g, {xv, mv}, qv, [](ir::Expr& e, auto in) {
    const int32_t d = e.binary(BinaryFn::kSub, in[0], in[1]);
    e.binary(BinaryFn::kMul, d, d);
  });
  add_reduce(g, hw::ReduceFn::kSum, qv, sv, 1);
  add_expr(g, {sv}, sv, [&](ir::Expr& e, auto in) {
    e.unary(UnaryFn::kRsqrt,
            e.binary(BinaryFn::kAdd, e.binary(BinaryFn::kMul, in[0], e.constant(inv)), e.constant(eps)));
  });
  add_expr(g, {xv, mv, sv}, ov,
           [](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, e.binary(BinaryFn::kSub, in[0], in[1]), in[2]); });
  g.num_args = static_cast<uint32_t>(kern.args.size());
  kern.program = compiler::compile(g, env.target);

  const auto n = static_cast<double>(numel);
  kern.work.vector = {{6 * n, DType::kF32, false}, {3.0 * rows, DType::kF32, false}, {1.0 * rows, DType::kF32, true}};
  kern.work.min_bytes = 2 * kern.buffers[x].bytes();
  kern.work.min_store_bytes = kern.buffers[x].bytes();
  kern.check_size = n;
  const double u = unit_roundoff(dtype, env.formats);
  kern.golden = [=](const Kernel& kk) {
    Expected e = layernorm_reference(kk.buffers[x].values, rows, cols, eps, u);
    e.buffer = out;
    return e;
  };
  return kern;
}

Kernel make_attention(const BuildEnv& env, uint32_t batch, uint32_t heads, uint32_t seq, uint32_t dim, DType dtype) {
  Kernel kern;
  kern.name = "attention";
  kern.dims = {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"dim", dim}};
  kern.dtype = dtype;
  std::mt19937_64 rng(env.seed);
  const int64_t B = batch, H = heads, S = seq, D = dim;
  const uint64_t bh = uint64_t{batch} * heads, numel = bh * seq * dim, scores = bh * seq * seq;
  const uint32_t q = add_buffer(kern, "Q", dtype, numel, Role::kInput);
  const uint32_t k = add_buffer(kern, "K", dtype, numel, Role::kInput);
  const uint32_t v = add_buffer(kern, "V", dtype, numel, Role::kInput);
  const uint32_t o = add_buffer(kern, "O", dtype, numel, Role::kOutput);
  for (uint32_t in : {q, k, v}) kern.buffers[in].values = random_values(rng, numel, -1, 1, dtype, env);
  // One ir::Attention op: the device's SDPA kernel (compiler/src/lower/attention.cpp), whose scores
  // stay in the scratchpad: S = Q K^T / sqrt(D) and its online row softmax in fp32, O = P V.
  ir::Graph g;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  ir::Op op;
  op.family = ir::Op::Family::kAttention;
  op.attention.q = g.add_view(contiguous(q, {B, H, S, D}, dtype));
  op.attention.k = g.add_view(contiguous(k, {B, H, S, D}, dtype));
  op.attention.v = g.add_view(contiguous(v, {B, H, S, D}, dtype));
  op.attention.out = g.add_view(contiguous(o, {B, H, S, D}, dtype));
  op.attention.scale = scale;
  g.ops.push_back(op);
  g.num_args = static_cast<uint32_t>(kern.args.size());
  kern.program = compiler::compile(g, env.target);

  const auto n = static_cast<double>(scores);
  kern.work.matmul_flops = 4.0 * static_cast<double>(scores) * dim;
  kern.work.matmul_dtype = dtype;
  // The softmax's least SFP work: row max, subtract and row sum (simple) and exp (transcendental)
  // per score, and one divide per output element (the normalization).
  kern.work.vector = {{3 * n, DType::kF32, false}, {n + static_cast<double>(numel), DType::kF32, true}};
  kern.work.min_bytes = 4 * kern.buffers[q].bytes();
  kern.work.min_store_bytes = kern.buffers[q].bytes();
  kern.check_size = 2.0 * static_cast<double>(scores) * dim;
  const double u = unit_roundoff(dtype, env.formats);
  kern.golden = [=](const Kernel& kk) {
    Expected e = attention_reference(kk.buffers[q].values, kk.buffers[k].values, kk.buffers[v].values,
                                     static_cast<uint32_t>(bh), seq, dim, scale, u);
    e.buffer = o;
    return e;
  };
  return kern;
}

Kernel make_instructions(const BuildEnv& env, uint64_t count, uint32_t cores) {
  constexpr uint32_t kAdds = 7, kPerIteration = kAdds + 2, kCols = 16;
  if (cores == 0 || cores > env.target.cores) {
    throw std::invalid_argument(fmt::format("instructions: --cores must be 1..{}", env.target.cores));
  }
  const uint64_t iterations = std::max<uint64_t>(1, count / kPerIteration / cores);
  if (iterations * kAdds > (1u << 24)) {
    throw std::invalid_argument("instructions: at most 2^24 adds per core (fp32 counts exactly up to there)");
  }
  Kernel kern;
  kern.name = "instructions";
  kern.dims = {{"count", static_cast<int64_t>(iterations * kPerIteration * cores)}, {"cores", cores}};
  kern.dtype = DType::kF32;
  const uint32_t out = add_buffer(kern, "out", DType::kF32, uint64_t{cores} * kCols, Role::kOutput);
  const auto instr = [](hw::Op op) {
    hw::Instr i{};
    i.op = op;
    return i;
  };
  std::vector<hw::Instr> code;
  hw::Instr in = instr(hw::Op::kArg);  // r1 = out
  in.a = 1;
  code.push_back(in);
  in = instr(hw::Op::kRank);  // r2 = rank, r3 = cores
  in.a = 2;
  code.push_back(in);
  in = instr(hw::Op::kMuli);  // r4 = out + rank * 64
  in.a = 4;
  in.d = 2;
  in.b = uint64_t{kCols} * 4;
  code.push_back(in);
  in = instr(hw::Op::kAdd);
  in.a = 4;
  in.d = 4;
  in.e = 1;
  code.push_back(in);
  in = instr(hw::Op::kFill);  // x = 0
  in.dtype = DType::kF32;
  in.d = 1;
  in.e = kCols;
  code.push_back(in);
  in = instr(hw::Op::kLi);  // r5 = 0 (iteration), r6 = iterations
  in.a = 5;
  code.push_back(in);
  in.a = 6;
  in.b = iterations;
  code.push_back(in);
  const auto loop = static_cast<uint32_t>(code.size());
  const float one = 1.0f;
  uint32_t one_bits;
  std::memcpy(&one_bits, &one, 4);
  for (uint32_t k = 0; k < kAdds; ++k) {
    in = instr(hw::Op::kBinary);  // x = x + 1
    in.dtype = DType::kF32;
    in.c = static_cast<uint64_t>(BinaryFn::kAdd) | uint64_t{one_bits} << 32;
    in.flags = hw::bcast_flags(hw::Bcast::kFull, hw::Bcast::kImm);
    in.d = 1;
    in.e = kCols;
    code.push_back(in);
  }
  in = instr(hw::Op::kAddi);
  in.a = 5;
  in.d = 5;
  in.b = 1;
  code.push_back(in);
  in = instr(hw::Op::kBranch);
  in.flags = static_cast<uint8_t>(hw::Cond::kLtu);
  in.d = 5;
  in.e = 6;
  in.a = loop;
  code.push_back(in);
  in = instr(hw::Op::kStore);
  in.regs = hw::pack_regs(4, 0);
  in.c = uint64_t{kCols} * 4;
  in.d = 1;
  in.e = kCols * 4;
  code.push_back(in);
  kern.program = compiler::assemble_spmd(fmt::format("instructions x{}", iterations * kPerIteration), code, cores, 1);
  kern.work.vector = {{static_cast<double>(iterations * kAdds * kCols * cores), DType::kF32, false}};
  kern.work.min_bytes = kern.buffers[out].bytes();
  kern.work.min_store_bytes = kern.buffers[out].bytes();
  kern.check_size = static_cast<double>(cores) * kCols;
  kern.golden = [out, iterations](const Kernel& k) {
    Expected e;
    e.buffer = out;
    e.values.assign(k.buffers[out].numel, static_cast<double>(iterations * kAdds));
    e.tolerance.assign(k.buffers[out].numel, 0.5);  // whole numbers: any error is at least 1
    return e;
  };
  return kern;
}

}  // namespace spyre::simtool
