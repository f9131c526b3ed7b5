// Calls, builders and the library's catalogue: which family lowers each op, and the helpers the
// families share (copies, fills, scaling, packing, reductions over dims that do not merge).
#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "../lower/layout.h"
#include "../lower/lower.h"
#include "family.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::ops {

Arg Arg::tensor(uint32_t v, bool one_element) {
  Arg a;
  a.kind = Kind::kTensor;
  a.view = v;
  a.one_element = one_element;
  return a;
}

Arg Arg::num(double x, bool integral) {
  Arg a;
  a.kind = Kind::kNumber;
  a.number = x;
  const auto exact = ir::Operand::exact(x);
  a.integral = integral && exact.has_value();
  if (a.integral) a.integer = *exact;
  return a;
}

Arg Arg::whole(int64_t x) {
  Arg a;
  a.kind = Kind::kNumber;
  a.number = static_cast<double>(x);
  a.integral = true;
  a.integer = x;
  return a;
}

Arg Arg::boolean(bool b) {
  Arg a;
  a.kind = Kind::kBool;
  a.flag = b;
  a.number = b ? 1 : 0;
  return a;
}

Arg Arg::string(std::string s) {
  Arg a;
  a.kind = Kind::kString;
  a.text = std::move(s);
  return a;
}

Arg Arg::list(std::vector<int64_t> v) {
  Arg a;
  a.kind = Kind::kInts;
  a.ints = std::move(v);
  return a;
}

Arg Arg::tensors(std::vector<uint32_t> v) {
  Arg a;
  a.kind = Kind::kTensors;
  a.views = std::move(v);
  return a;
}

Arg Arg::fused(std::shared_ptr<const Call> c) {
  Arg a;
  a.kind = Kind::kExpr;
  a.expr = std::move(c);
  return a;
}

const Arg* Call::get(std::string_view name) const {
  const auto it = args.find(name);
  return it == args.end() || it->second.kind == Arg::Kind::kNone ? nullptr : &it->second;
}

uint32_t Call::tensor(std::string_view name) const {
  const Arg* a = get(name);
  if (!a || a->kind != Arg::Kind::kTensor) reject(*this, fmt::format("argument '{}' is not a tensor", name));
  return a->view;
}

double Call::number(std::string_view name, double fallback) const {
  const Arg* a = get(name);
  if (!a) return fallback;
  if (a->kind != Arg::Kind::kNumber && a->kind != Arg::Kind::kBool) {
    reject(*this, fmt::format("argument '{}' is not a number", name));
  }
  return a->number;
}

int64_t Call::integer(std::string_view name, int64_t fallback) const {
  const Arg* a = get(name);
  if (!a) return fallback;
  if ((a->kind != Arg::Kind::kNumber || !a->integral) && a->kind != Arg::Kind::kBool) {
    reject(*this, fmt::format("argument '{}' is not an integer", name));
  }
  return a->kind == Arg::Kind::kBool ? int64_t{a->flag} : a->integer;
}

bool Call::flag(std::string_view name, bool fallback) const {
  const Arg* a = get(name);
  if (!a) return fallback;
  if (a->kind == Arg::Kind::kBool) return a->flag;
  if (a->kind == Arg::Kind::kNumber) return a->number != 0;
  reject(*this, fmt::format("argument '{}' is not a bool", name));
}

std::string Call::text(std::string_view name, std::string fallback) const {
  const Arg* a = get(name);
  if (!a) return fallback;
  if (a->kind != Arg::Kind::kString) reject(*this, fmt::format("argument '{}' is not a string", name));
  return a->text;
}

uint32_t Call::out(size_t i) const {
  if (!wants(i)) reject(*this, fmt::format("result {} has no view", i));
  return static_cast<uint32_t>(outs[i]);
}

uint32_t Builder::add_view(ir::View v) {
  for (uint32_t i = 0; i < g_.views.size(); ++i) {
    const ir::View& w = g_.views[i];
    if (w.arg == v.arg && w.offset == v.offset && w.sizes == v.sizes && w.strides == v.strides && w.dtype == v.dtype) {
      return i;
    }
  }
  return g_.add_view(std::move(v));
}

uint32_t Builder::derive(uint32_t of, int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  const ir::View& base = view(of);
  if (sizes.size() != strides.size()) throw Malformed("ops: a derived view's sizes and strides differ");
  ir::View v{base.arg, base.offset + offset, std::move(sizes), std::move(strides), base.dtype};
  return add_view(std::move(v));
}

namespace {

ir::Op op_of(ir::Op::Family f) {
  ir::Op op;
  op.family = f;
  return op;
}

}  // namespace

void Builder::add(ir::Pointwise p) {
  ir::Op op = op_of(ir::Op::Family::kPointwise);
  op.pointwise = std::move(p);
  g_.ops.push_back(std::move(op));
}

void Builder::add(ir::Reduce r) {
  ir::Op op = op_of(ir::Op::Family::kReduce);
  op.reduce = std::move(r);
  g_.ops.push_back(std::move(op));
}

void Builder::add(ir::Matmul m) {
  ir::Op op = op_of(ir::Op::Family::kMatmul);
  op.matmul = m;
  g_.ops.push_back(std::move(op));
}

void Builder::add(ir::Index x) {
  ir::Op op = op_of(ir::Op::Family::kIndex);
  op.index = x;
  g_.ops.push_back(std::move(op));
}

void Builder::add(ir::Scan s) {
  ir::Op op = op_of(ir::Op::Family::kScan);
  op.scan = s;
  g_.ops.push_back(std::move(op));
}

void Builder::add(ir::Sort s) {
  ir::Op op = op_of(ir::Op::Family::kSort);
  op.sort = s;
  g_.ops.push_back(std::move(op));
}

void Builder::add(ir::Attention a) {
  ir::Op op = op_of(ir::Op::Family::kAttention);
  op.attention = a;
  g_.ops.push_back(std::move(op));
}

// ---- shared helpers ------------------------------------------------------------------------------

void reject(const Call& c, const std::string& why) {
  throw Unsupported(fmt::format("ops: {}: {}", c.op, why));
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

bool is_contiguous(const ir::View& v) {
  int64_t expect = 1;
  for (size_t i = v.sizes.size(); i-- > 0;) {
    if (v.sizes[i] != 1 && v.strides[i] != expect) return false;
    expect *= v.sizes[i];
  }
  return true;
}

bool overlap(const ir::View& a, const ir::View& b) {
  if (a.arg != b.arg || a.numel() == 0 || b.numel() == 0) return false;
  const auto span = [](const ir::View& v) {  // [first, last] byte touched
    int64_t lo = v.offset, hi = v.offset;
    for (size_t i = 0; i < v.sizes.size(); ++i) {
      const int64_t reach = (v.sizes[i] - 1) * v.strides[i];
      (reach < 0 ? lo : hi) += reach;
    }
    const int64_t es = hw::dtype_size(v.dtype);
    return std::pair{lo * es, (hi + 1) * es - 1};
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 <= b1 && b0 <= a1;
}

std::vector<int64_t> wrap_dims(std::vector<int64_t> dims, size_t n) {
  if (dims.empty()) {
    dims.resize(n);
    std::iota(dims.begin(), dims.end(), 0);
    return dims;
  }
  const auto nd = static_cast<int64_t>(std::max<size_t>(n, 1));
  for (int64_t& d : dims) {
    if (d < -nd || d >= nd) throw Malformed(fmt::format("ops: dim {} out of range for {} dims", d, n));
    d = (d + nd) % nd;
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (n == 0) dims.clear();  // a 0-dim tensor: dim 0 or -1 names the tensor itself
  return dims;
}

void copy(Builder& b, uint32_t in, uint32_t out) {
  // A pointwise nest walks its tile's two dims and a few loop levels: a copy of more dims (after
  // merging those both sides walk contiguously) goes as one copy per index of its leading dim.
  const ir::View src = b.view(in), dst = b.view(out);
  lower::Space space;
  space.sizes = dst.sizes;
  space.strides = {lower::broadcast_strides(src, dst.sizes), dst.strides};
  if (lower::simplify(space).sizes.size() > kMaxCopyDims) {
    size_t lead = 0;
    while (dst.sizes[lead] == 1) ++lead;
    std::vector<int64_t> sizes = dst.sizes, from = space.strides[0], to = dst.strides;
    sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(lead));
    from.erase(from.begin() + static_cast<std::ptrdiff_t>(lead));
    to.erase(to.begin() + static_cast<std::ptrdiff_t>(lead));
    for (int64_t i = 0; i < dst.sizes[lead]; ++i) {
      copy(b, b.derive(in, i * space.strides[0][lead], sizes, from), b.derive(out, i * dst.strides[lead], sizes, to));
    }
    return;
  }
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kCopy;
  p.compute = b.view(out).dtype;
  p.inputs = {ir::Operand::of(in)};
  p.out = out;
  b.add(std::move(p));
}

void scale(Builder& b, uint32_t in, uint32_t out, double k, hw::DType t) {
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kBinary;
  p.binary = hw::BinaryFn::kMul;
  p.compute = t;
  p.inputs = {ir::Operand::of(in), ir::Operand::constant(k)};
  p.out = out;
  b.add(std::move(p));
}

void fill(Builder& b, uint32_t out, double value) {
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kFill;
  p.compute = b.view(out).dtype;
  p.start = value;
  p.start_int = ir::Operand::exact(value);
  p.out = out;
  b.add(std::move(p));
}

void write(Builder& b, const Call& c, const Arg& a, uint32_t out) {
  switch (a.kind) {
    case Arg::Kind::kTensor:
      copy(b, a.view, out);
      return;
    case Arg::Kind::kNumber:
    case Arg::Kind::kBool:
      fill(b, out, a.number);
      return;
    case Arg::Kind::kExpr: {
      Call wrap = *a.expr;
      wrap.outs = {out};
      lower_pointwise(b, wrap);
      return;
    }
    default:
      reject(c, "expected a tensor or a number");
  }
}

uint32_t packed(Builder& b, uint32_t v) {
  if (is_contiguous(b.view(v))) return v;
  const ir::View src = b.view(v);
  const uint32_t t = b.temp(src.sizes, src.dtype);
  copy(b, v, t);
  return t;
}

void reduce(Builder& b, hw::ReduceFn fn, hw::DType compute, uint32_t in, uint32_t out, std::vector<int64_t> dims) {
  if (!lower::reduce_dims_merge(b.view(in), b.view(out), dims)) {
    // Kept dims first, reduced dims last, in a contiguous copy; the output viewed in that order.
    const ir::View src = b.view(in), dst = b.view(out);
    std::vector<int64_t> perm;
    for (size_t d = 0; d < src.sizes.size(); ++d) {
      if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) perm.push_back(int64_t(d));
    }
    const size_t kept = perm.size();
    perm.insert(perm.end(), dims.begin(), dims.end());
    std::vector<int64_t> ps, pst, os, ost;
    for (int64_t d : perm) {
      ps.push_back(src.sizes[size_t(d)]);
      pst.push_back(src.strides[size_t(d)]);
      os.push_back(dst.sizes[size_t(d)]);
      ost.push_back(dst.strides[size_t(d)]);
    }
    const uint32_t t = b.temp(ps, src.dtype);
    copy(b, b.derive(in, ps, pst), t);
    in = t;
    out = b.derive(out, os, ost);
    dims.clear();
    for (size_t d = kept; d < perm.size(); ++d) dims.push_back(int64_t(d));
  }
  ir::Reduce r;
  r.fn = fn;
  r.compute = compute;
  r.in = in;
  r.out = out;
  r.dims = std::move(dims);
  b.add(r);
}

// ---- the catalogue -------------------------------------------------------------------------------

namespace {

struct Family {
  const char* name;
  const Table* ops;
};

const std::vector<Family>& families() {
  static const std::vector<Family> all = {{"reduce", &reduce_ops()},       {"matmul", &matmul_ops()},
                                          {"index", &index_ops()},         {"movement", &movement_ops()},
                                          {"attention", &attention_ops()}, {"conv", &conv_ops()}};
  return all;
}

const Op* find(std::string_view op) {
  for (const Family& f : families()) {
    if (const auto it = f.ops->find(op); it != f.ops->end()) return &it->second;
  }
  return nullptr;
}

}  // namespace

Kind kind(std::string_view op) {
  if (pointwise_op(op)) return Kind::kPointwise;
  return find(op) ? Kind::kOp : Kind::kNone;
}

std::map<std::string, Entry> catalogue() {
  std::map<std::string, Entry> out;
  for (const std::string& name : pointwise_names()) out[name] = {Kind::kPointwise, "pointwise", 1};
  for (const Family& f : families()) {
    for (const auto& [name, op] : *f.ops) out[name] = {Kind::kOp, f.name, op.results};
  }
  return out;
}

void lower(Builder& b, const Call& c) {
  if (pointwise_op(c.op)) return lower_pointwise(b, c);
  const Op* op = find(c.op);
  if (!op) reject(c, "the op library does not lower this op");
  op->lower(b, c);
}

}  // namespace spyre::compiler::ops
