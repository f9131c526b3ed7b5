#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "spyre/compiler/ir.h"

namespace spyre::compiler::ir {
namespace {

// The program cache's key, as bytes: every number by its bits, every list after its length. Built
// on every eager launch, so it must cost far less than formatting text would.
class Key {
 public:
  template <typename T>
  Key& operator<<(const T& v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "a key holds numbers");
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Key& operator<<(char tag) {
    bytes_ += tag;
    return *this;
  }
  template <typename T>
  Key& operator<<(const std::optional<T>& v) {
    *this << v.has_value();
    return v ? *this << *v : *this;
  }
  template <typename T>
  Key& operator<<(const std::vector<T>& v) {
    *this << v.size();
    for (const T& x : v) *this << x;
    return *this;
  }
  Key& operator<<(const std::string& text) {
    *this << text.size();
    bytes_ += text;
    return *this;
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

// Appends what makes `op` itself: with the views, it names the program.
void describe(Key& k, const Op& op) {
  k << op.family;
  switch (op.family) {
    case Op::Family::kAttention: {
      const Attention& a = op.attention;
      k << a.causal << a.q << a.k << a.v << a.out << a.lse << a.bias << a.scale;
      return;
    }
    case Op::Family::kSort:
      k << op.sort.descending << op.sort.in << op.sort.values << op.sort.indices;
      return;
    case Op::Family::kScan:
      k << op.scan.fn << op.scan.compute << op.scan.in << op.scan.out;
      return;
    case Op::Family::kIndex:
      k << op.index.kind << op.index.table << op.index.index << op.index.rows;
      return;
    case Op::Family::kMatmul: {
      const Matmul& m = op.matmul;
      k << m.compute << m.a << m.b << m.out << m.bias << m.alpha << m.beta << m.activation << m.residual
        << m.residual_fn;
      return;
    }
    case Op::Family::kReduce: {
      const Reduce& r = op.reduce;
      k << r.fn << r.compute << r.in << r.out << r.dims;
      return;
    }
    case Op::Family::kPointwise:
      break;
  }
  const Pointwise& p = op.pointwise;
  k << p.kind << p.unary << p.binary << p.compute << p.start << p.start_int << p.step << p.out << p.rng_arg
    << p.inputs.size();
  for (const Operand& o : p.inputs) k << o.kind << o.view << o.scalar << o.integer;
  k << p.steps.size();
  for (const Step& st : p.steps) {
    k << st.kind << st.unary << st.binary << st.start << st.start_int << st.step << st.args << st.reduce << st.to;
  }
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
  Key k;
  k << num_args << views.size();
  for (const View& v : views) k << v.dtype << v.arg << v.offset << v.sizes << v.strides;
  k << ops.size();
  for (const Op& op : ops) describe(k, op);
  k << title;  // part of the program's image (its name)
  return k.take();
}

std::string Graph::op_name(size_t i) const {
  const Op& op = ops.at(i);
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
  const View& v = views.at(op.family == Op::Family::kReduce ? op.reduce.out : op.pointwise.out);
  return fmt::format("{} {} [{}]", op.family == Op::Family::kReduce ? "reduce" : "pointwise", hw::dtype_name(v.dtype),
                     fmt::join(v.sizes, ","));
}

std::string Graph::name() const {
  if (ops.empty()) return "empty";
  const Op::Family f = ops.front().family;
  if (f != Op::Family::kReduce && f != Op::Family::kPointwise) return op_name(0);
  // "pointwise" and "reduce" say how the kernel runs, not what it is: its title leads, and the
  // count of the ops after the first follows the kind ("reduce +7 f32 [64,1]").
  std::string inner = op_name(0);
  if (ops.size() > 1) inner.insert(inner.find(' '), fmt::format(" +{}", ops.size() - 1));
  return title.empty() ? inner : fmt::format("{} ({})", title, inner);
}

std::string View::describe() const {
  std::vector<int64_t> contiguous(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) contiguous[d - 1] = contiguous[d] * sizes[d];
  std::string s = fmt::format("{} [{}]", hw::dtype_name(dtype), fmt::join(sizes, ", "));
  if (strides != contiguous) s += fmt::format(" strides [{}]", fmt::join(strides, ", "));
  if (offset != 0) s += fmt::format(" + {}", offset);
  return s;
}

}  // namespace spyre::compiler::ir
