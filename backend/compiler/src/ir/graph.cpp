#include <functional>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "spyre/compiler/ir.h"

namespace spyre::compiler::ir {
namespace {

std::string describe(const Op& op) {
  if (op.family == Op::Family::kAttention) {
    const Attention& a = op.attention;
    return fmt::format("attn{}/{},{},{}>{}/{}/{}/{}", a.causal ? "c" : "", a.q, a.k, a.v, a.out, a.lse, a.bias,
                       a.scale);
  }
  if (op.family == Op::Family::kSort) {
    return fmt::format("sort{}/{}>{},{}", op.sort.descending ? "d" : "a", op.sort.in, op.sort.values, op.sort.indices);
  }
  if (op.family == Op::Family::kScan) {
    return fmt::format("scan{}/{}/{}>{}", static_cast<int>(op.scan.fn), hw::dtype_name(op.scan.compute), op.scan.in,
                       op.scan.out);
  }
  if (op.family == Op::Family::kIndex) {
    const Index& x = op.index;
    return fmt::format("idx{}/{}/{}/{}", static_cast<int>(x.kind), x.table, x.index, x.rows);
  }
  if (op.family == Op::Family::kMatmul) {
    const Matmul& m = op.matmul;
    return fmt::format("mm/{}/{}@{}>{}+{}/{}/{}/act{}+{}/{}", hw::dtype_name(m.compute), m.a, m.b, m.out, m.bias,
                       m.alpha, m.beta, static_cast<int>(m.activation), m.residual, static_cast<int>(m.residual_fn));
  }
  if (op.family == Op::Family::kReduce) {
    const Reduce& r = op.reduce;
    return fmt::format("reduce{}/{}/{}>{}[{}]", static_cast<int>(r.fn), hw::dtype_name(r.compute), r.in, r.out,
                       fmt::join(r.dims, ","));
  }
  const Pointwise& p = op.pointwise;
  std::string s = fmt::format("pw{}/{}/{}/{}/{}{}/{}/{}>{}", static_cast<int>(p.kind), static_cast<int>(p.unary),
                              static_cast<int>(p.binary), hw::dtype_name(p.compute), p.start,
                              p.start_int ? fmt::format("i{}", *p.start_int) : "", p.step, p.inputs.size(), p.out);
  for (const Operand& o : p.inputs) {
    if (o.kind == Operand::Kind::kView) {
      s += fmt::format(",v{}", o.view);
    } else {
      s += o.integer ? fmt::format(",i{}", *o.integer) : fmt::format(",s{}", o.scalar);
    }
  }
  if (p.rng_arg >= 0) s += fmt::format(",rng{}", p.rng_arg);
  for (const Step& st : p.steps) {
    s += fmt::format(";{}/{}/{}/{}/{}/{}({})", static_cast<int>(st.kind), static_cast<int>(st.unary),
                     static_cast<int>(st.binary), st.start, st.start_int ? fmt::format("i{}", *st.start_int) : "",
                     st.step, fmt::join(st.args, ","));
    if (st.kind == PointwiseKind::kReduce) s += fmt::format("r{}", static_cast<int>(st.reduce));
  }
  return s;
}

}  // namespace

std::vector<Step> Pointwise::expression() const {
  if (!steps.empty()) return steps;
  Step s;
  s.kind = kind;
  s.unary = unary;
  s.binary = binary;
  s.start = start;
  s.start_int = start_int;
  s.step = step;
  for (size_t i = 0; i < inputs.size(); ++i) s.args.push_back(static_cast<int32_t>(i));
  return {s};
}

int64_t View::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string Graph::signature() const {
  std::string s = fmt::format("args{}", num_args);
  for (const View& v : views) {
    s += fmt::format("|{}@{}+{}:{}:{}", hw::dtype_name(v.dtype), v.arg, v.offset, fmt::join(v.sizes, "x"),
                     fmt::join(v.strides, ","));
  }
  for (const Op& op : ops) s += "|" + describe(op);
  return s;
}

std::string Graph::name() const {
  if (ops.empty()) return "empty";
  const Op& op = ops.front();
  if (op.family == Op::Family::kMatmul) {
    const std::vector<int64_t>& a = views.at(op.matmul.a).sizes;
    const std::vector<int64_t>& o = views.at(op.matmul.out).sizes;
    const int64_t batch = std::accumulate(o.begin(), o.end() - 2, int64_t{1}, std::multiplies<>());
    return fmt::format("{}mm {} {}{}x{}x{}{}", batch > 1 ? "b" : "", hw::dtype_name(op.matmul.compute),
                       batch > 1 ? fmt::format("{}x", batch) : "", o[o.size() - 2], a.back(), o.back(),
                       op.matmul.bias >= 0 ? " +bias" : "");
  }
  if (op.family == Op::Family::kAttention) {
    const std::vector<int64_t>& q = views.at(op.attention.q).sizes;
    const std::vector<int64_t>& k = views.at(op.attention.k).sizes;
    return fmt::format("attention {} [{}] x {} keys{}", hw::dtype_name(views.at(op.attention.q).dtype),
                       fmt::join(q, ","), k.size() == 4 ? k[2] : 0,
                       op.attention.causal      ? " causal"
                       : op.attention.bias >= 0 ? " +mask"
                                                : "");
  }
  if (op.family == Op::Family::kSort) {
    const View& v = views.at(op.sort.values);
    return fmt::format("sort {} [{}]", hw::dtype_name(v.dtype), fmt::join(v.sizes, ","));
  }
  if (op.family == Op::Family::kScan) {
    const View& v = views.at(op.scan.out);
    return fmt::format("scan {} [{}]", hw::dtype_name(v.dtype), fmt::join(v.sizes, ","));
  }
  if (op.family == Op::Family::kIndex) {
    static const char* const kinds[] = {"gather",      "scatter",     "scatter_add",
                                        "scatter_mul", "scatter_max", "scatter_min"};
    const View& v = views.at(op.index.rows);
    return fmt::format("{} {} [{}]", kinds[static_cast<int>(op.index.kind)], hw::dtype_name(v.dtype),
                       fmt::join(v.sizes, ","));
  }
  const uint32_t out = op.family == Op::Family::kReduce ? op.reduce.out : op.pointwise.out;
  const char* kind = op.family == Op::Family::kReduce ? "reduce" : "pointwise";
  const View& v = views.at(out);
  return fmt::format("{}{} {} [{}]", kind, ops.size() > 1 ? fmt::format(" +{}", ops.size() - 1) : "",
                     hw::dtype_name(v.dtype), fmt::join(v.sizes, ","));
}

}  // namespace spyre::compiler::ir
