// The torch.compile front door: a segment of the planner (views and calls, in JSON) lowered into one
// graph by the op library, each call's temporaries carved in order out of the region the planner
// gave it in the segment's arena.
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "../ir/json_read.h"
#include "family.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::ops {
namespace {

using namespace json_read;  // NOLINT(google-build-using-namespace): the readers of the compiler's documents

// Temporaries in one region (bytes [offset, offset + limit) of launch argument `arg`), in order.
class RegionBuilder final : public Builder {
 public:
  RegionBuilder(ir::Graph& g, uint32_t arg, uint64_t offset, uint64_t limit)
      : Builder(g), arg_(arg), start_(offset), at_(offset), limit_(limit) {}

  uint32_t temp(const std::vector<int64_t>& sizes, hw::DType dtype) override {
    const uint64_t es = hw::dtype_size(dtype);
    at_ = (at_ + kTempAlign - 1) / kTempAlign * kTempAlign;
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;  // bytes; contiguous_strides treats a 0 as 1
    ir::View v{arg_, static_cast<int64_t>(at_ / es), sizes, contiguous_strides(sizes), dtype};
    at_ += static_cast<uint64_t>(n) * es;
    if (used() > limit_) {
      // The region is the size examine() asked for: a smaller one is the caller's bug.
      throw Malformed(fmt::format("ops: temporaries of {} bytes overflow the region of {}", used(), limit_));
    }
    return add_view(std::move(v));
  }
  uint64_t used() const { return at_ - start_; }

 private:
  uint32_t arg_;
  uint64_t start_, at_, limit_;
};

// The fused producers of one node's expression by their text: a producer the planner nests in
// several places (a value read twice) is one call, so the expression computes it once.
using Shared = std::map<std::string, std::shared_ptr<Call>, std::less<>>;

Arg arg_of(const json& j, uint32_t views, const std::string& where, Shared& shared);

std::shared_ptr<Call> call_of(const json& j, uint32_t views, const std::string& where, Shared& shared) {
  auto c = std::make_shared<Call>();
  const json& op = field(j, "op", where);
  if (!op.is_string()) bad(where + ".op", "expected an op name");
  c->op = op.get<std::string>();
  if (j.contains("args")) {
    const json& args = j.at("args");
    if (!args.is_object()) bad(where + ".args", "expected an object");
    for (const auto& [name, value] : args.items()) {
      std::string at = where;
      at += ".args.";
      at += name;
      c->args[name] = arg_of(value, views, at, shared);
    }
  }
  if (j.contains("outs")) {
    const json& outs = j.at("outs");
    if (!outs.is_array()) bad(where + ".outs", "expected a list");
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string w = fmt::format("{}.outs[{}]", where, i);
      c->outs.push_back(integer(outs[i], w) < 0 ? int64_t{-1} : int64_t{index(outs[i], views, w)});
    }
  }
  if (j.contains("common")) c->common = dtype(j.at("common"), where + ".common");
  if (j.contains("result")) c->result = dtype(j.at("result"), where + ".result");
  return c;
}

Arg arg_of(const json& j, uint32_t views, const std::string& where, Shared& shared) {
  if (j.is_null()) return {};
  if (j.is_boolean()) return Arg::boolean(j.get<bool>());
  if (j.is_number_integer()) return Arg::whole(j.get<int64_t>());
  if (j.is_number()) return Arg::num(j.get<double>());
  if (j.is_string()) return Arg::string(j.get<std::string>());
  if (j.is_array()) return Arg::list(integers(j, where));
  if (j.is_object() && j.contains("view")) {
    if (j.contains("one_element") && !j.at("one_element").is_boolean()) bad(where + ".one_element", "expected a bool");
    const bool one = j.contains("one_element") && j.at("one_element").get<bool>();
    return Arg::tensor(index(j.at("view"), views, where + ".view"), one);
  }
  if (j.is_object() && j.contains("views")) {
    std::vector<uint32_t> v;
    const json& list = j.at("views");
    if (!list.is_array()) bad(where + ".views", "expected a list");
    for (size_t i = 0; i < list.size(); ++i) v.push_back(index(list[i], views, fmt::format("{}.views[{}]", where, i)));
    return Arg::tensors(std::move(v));
  }
  if (j.is_object() && j.contains("float")) return Arg::num(number(j.at("float"), where + ".float"));
  if (j.is_object() && j.contains("node")) {
    std::string text = j.at("node").dump();
    const auto it = shared.find(text);
    if (it != shared.end()) return Arg::fused(it->second);
    std::shared_ptr<Call> c = call_of(j.at("node"), views, where + ".node", shared);
    shared.emplace(std::move(text), c);
    return Arg::fused(std::move(c));
  }
  bad(where,
      "expected null, a number, a bool, a string, a list of ints or an object with 'view', 'views', "
      "'float' or 'node'");
}

// Every view an op names.
std::vector<uint32_t> views_of(const ir::Op& op) {
  switch (op.family) {
    case ir::Op::Family::kPointwise: {
      std::vector<uint32_t> v = {op.pointwise.out};
      for (const ir::Operand& o : op.pointwise.inputs) {
        if (o.kind == ir::Operand::Kind::kView) v.push_back(o.view);
      }
      return v;
    }
    case ir::Op::Family::kReduce:
      return {op.reduce.in, op.reduce.out};
    case ir::Op::Family::kMatmul: {
      std::vector<uint32_t> v = {op.matmul.a, op.matmul.b, op.matmul.out};
      if (op.matmul.bias >= 0) v.push_back(static_cast<uint32_t>(op.matmul.bias));
      return v;
    }
    case ir::Op::Family::kIndex:
      return {op.index.table, op.index.index, op.index.rows};
    case ir::Op::Family::kScan:
      return {op.scan.in, op.scan.out};
    case ir::Op::Family::kSort:
      return {op.sort.in, op.sort.values, op.sort.indices};
    case ir::Op::Family::kAttention: {
      const ir::Attention& a = op.attention;
      std::vector<uint32_t> v = {a.q, a.k, a.v, a.out};
      if (a.lse >= 0) v.push_back(static_cast<uint32_t>(a.lse));
      if (a.bias >= 0) v.push_back(static_cast<uint32_t>(a.bias));
      return v;
    }
  }
  return {};
}

const json& nodes_of(const json& doc) {
  const json& nodes = field(doc, "nodes", "segment");
  if (!nodes.is_array()) bad("nodes", "expected a list");
  return nodes;
}

void lower_node(RegionBuilder& b, const Call& c, size_t i) {
  try {
    lower(b, c);
  } catch (const Unsupported& e) {
    throw Unsupported(fmt::format("segment: nodes[{}] ({}): {}", i, c.op, e.what()));
  } catch (const Malformed& e) {
    throw Malformed(fmt::format("segment: nodes[{}] ({}): {}", i, c.op, e.what()));
  } catch (const std::out_of_range& e) {  // a view or result the call names that the segment lacks
    throw Malformed(fmt::format("segment: nodes[{}] ({}): {}", i, c.op, e.what()));
  }
}

}  // namespace

ir::Graph segment_from_json(std::string_view text) {
  const json doc = parse(text);
  ir::Graph g;
  read_views(doc, g);
  const json& nodes = nodes_of(doc);
  const auto views = static_cast<uint32_t>(g.views.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string w = fmt::format("nodes[{}]", i);
    Shared shared;
    const std::shared_ptr<Call> c = call_of(nodes[i], views, w, shared);
    uint32_t arg = 0;
    uint64_t offset = 0, bytes = 0;
    if (nodes[i].contains("temp")) {
      const json& t = nodes[i].at("temp");
      arg = index(field(t, "arg", w + ".temp"), g.num_args, w + ".temp.arg");
      const int64_t at = integer(field(t, "offset", w + ".temp"), w + ".temp.offset");
      const int64_t n = integer(field(t, "bytes", w + ".temp"), w + ".temp.bytes");
      if (at < 0 || at % static_cast<int64_t>(kTempAlign) != 0 || n < 0) {
        bad(w + ".temp",
            fmt::format("a region at {} of {} bytes (it must start at a multiple of {})", at, n, kTempAlign));
      }
      offset = static_cast<uint64_t>(at);
      bytes = static_cast<uint64_t>(n);
    }
    RegionBuilder b(g, arg, offset, bytes);
    lower_node(b, *c, i);
  }
  return g;
}

std::vector<NodeInfo> examine(std::string_view text) {
  const json doc = parse(text);
  ir::Graph base;
  read_views(doc, base, UINT32_MAX);
  const json& nodes = nodes_of(doc);
  const auto views = static_cast<uint32_t>(base.views.size());
  std::vector<NodeInfo> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Shared shared;
    const std::shared_ptr<Call> c = call_of(nodes[i], views, fmt::format("nodes[{}]", i), shared);
    ir::Graph g = base;
    RegionBuilder b(g, base.num_args, 0, UINT64_MAX);  // temporaries in an argument of their own
    lower_node(b, *c, i);
    NodeInfo info;
    info.temp_bytes = b.used();
    if (const PointwiseOp* p = pointwise_op(c->op)) info.compute = compute_type(*p, *c);
    std::set<uint32_t> args;
    for (const ir::Op& op : g.ops) {
      for (const uint32_t v : views_of(op)) {
        if (g.views.at(v).arg < base.num_args) args.insert(g.views.at(v).arg);
      }
    }
    info.args.assign(args.begin(), args.end());
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace spyre::compiler::ops
