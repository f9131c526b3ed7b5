// A graph from its JSON form: how the torch.compile front door (Python) hands the compiler a graph.
// Every field is checked as it is read, so a malformed document is an std::invalid_argument naming
// the field, never a graph the lowerings have to distrust.
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "spyre/compiler/ir.h"
#include "spyre/hw/commands.h"

namespace spyre::compiler::ir {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::invalid_argument(fmt::format("graph json: {}: {}", where, what));
}

const json& field(const json& j, const char* name, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) bad(where, fmt::format("missing '{}'", name));
  return j.at(name);
}

int64_t integer(const json& j, const std::string& where) {
  if (!j.is_number_integer()) bad(where, "expected an integer");
  return j.get<int64_t>();
}

uint32_t index(const json& j, uint64_t limit, const std::string& where) {
  const int64_t v = integer(j, where);
  if (v < 0 || static_cast<uint64_t>(v) >= limit) bad(where, fmt::format("{} is not below {}", v, limit));
  return static_cast<uint32_t>(v);
}

double number(const json& j, const std::string& where) {
  if (j.is_string()) {  // JSON has no infinities or NaN: they travel as strings
    const std::string s = j.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  if (!j.is_number()) bad(where, "expected a number");
  return j.get<double>();
}

std::vector<int64_t> integers(const json& j, const std::string& where) {
  if (!j.is_array()) bad(where, "expected a list");
  std::vector<int64_t> v;
  for (size_t i = 0; i < j.size(); ++i) v.push_back(integer(j[i], fmt::format("{}[{}]", where, i)));
  return v;
}

hw::DType dtype(const json& j, const std::string& where) {
  if (!j.is_string()) bad(where, "expected a dtype name");
  for (uint8_t t = 0; t < static_cast<uint8_t>(hw::DType::kCount); ++t) {
    if (j.get<std::string>() == hw::dtype_name(static_cast<hw::DType>(t))) return static_cast<hw::DType>(t);
  }
  bad(where, fmt::format("unknown dtype '{}'", j.get<std::string>()));
}

template <typename Enum>
Enum enum_value(const json& j, const std::string& where) {
  return static_cast<Enum>(index(j, static_cast<uint64_t>(Enum::kCount), where));
}

Pointwise pointwise(const json& j, uint32_t views, const std::string& where) {
  Pointwise p;
  p.compute = dtype(field(j, "compute", where), where + ".compute");
  p.out = index(field(j, "out", where), views, where + ".out");
  const json& inputs = field(j, "inputs", where);
  if (!inputs.is_array()) bad(where + ".inputs", "expected a list");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string w = fmt::format("{}.inputs[{}]", where, i);
    if (inputs[i].is_object() && inputs[i].contains("view")) {
      p.inputs.push_back(Operand::of(index(inputs[i].at("view"), views, w)));
    } else {
      p.inputs.push_back(Operand::constant(number(field(inputs[i], "scalar", w), w)));
    }
  }
  const json& steps = field(j, "steps", where);
  if (!steps.is_array() || steps.empty()) bad(where + ".steps", "expected a non-empty list");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string w = fmt::format("{}.steps[{}]", where, i);
    const json& s = steps[i];
    Step step;
    const json& kind = field(s, "kind", w);
    const std::string k = kind.is_string() ? kind.get<std::string>() : "";
    size_t arity = 0;
    if (k == "copy") {
      step.kind = PointwiseKind::kCopy, arity = 1;
    } else if (k == "unary") {
      step.kind = PointwiseKind::kUnary, arity = 1;
      step.unary = enum_value<hw::UnaryFn>(field(s, "fn", w), w + ".fn");
    } else if (k == "binary") {
      step.kind = PointwiseKind::kBinary, arity = 2;
      step.binary = enum_value<hw::BinaryFn>(field(s, "fn", w), w + ".fn");
    } else if (k == "select") {
      step.kind = PointwiseKind::kSelect, arity = 3;
    } else if (k == "fill") {
      step.kind = PointwiseKind::kFill;
      step.start = number(field(s, "value", w), w + ".value");
    } else if (k == "iota") {
      step.kind = PointwiseKind::kIota;
      step.start = number(field(s, "start", w), w + ".start");
      step.step = number(field(s, "step", w), w + ".step");
    } else {
      bad(w + ".kind", fmt::format("unknown step kind {}", kind.dump()));
    }
    const std::vector<int64_t> args = arity ? integers(field(s, "args", w), w + ".args") : std::vector<int64_t>{};
    if (args.size() != arity) bad(w + ".args", fmt::format("{} takes {} arguments, got {}", k, arity, args.size()));
    for (const int64_t a : args) {
      // An input of the op, or an earlier step (step_ref(j) = -1 - j).
      if (a >= static_cast<int64_t>(p.inputs.size()) || a < -static_cast<int64_t>(i)) {
        bad(w + ".args", fmt::format("argument {} names neither an input nor an earlier step", a));
      }
      step.args.push_back(static_cast<int32_t>(a));
    }
    p.steps.push_back(std::move(step));
  }
  return p;
}

}  // namespace

Graph graph_from_json(std::string_view text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    bad("document", e.what());
  }
  Graph g;
  const int64_t num_args = integer(field(doc, "num_args", "graph"), "num_args");
  if (num_args < 0 || num_args > hw::kMaxLaunchArgs)
    bad("num_args", fmt::format("{} is not in [0, {}]", num_args, hw::kMaxLaunchArgs));
  g.num_args = static_cast<uint32_t>(num_args);
  const json& views = field(doc, "views", "graph");
  if (!views.is_array()) bad("views", "expected a list");
  for (size_t i = 0; i < views.size(); ++i) {
    const std::string w = fmt::format("views[{}]", i);
    View v;
    v.arg = index(field(views[i], "arg", w), g.num_args, w + ".arg");
    v.offset = integer(field(views[i], "offset", w), w + ".offset");
    v.sizes = integers(field(views[i], "sizes", w), w + ".sizes");
    v.strides = integers(field(views[i], "strides", w), w + ".strides");
    v.dtype = dtype(field(views[i], "dtype", w), w + ".dtype");
    if (v.sizes.size() != v.strides.size()) bad(w, "sizes and strides differ in length");
    g.add_view(std::move(v));
  }
  const auto nv = static_cast<uint32_t>(g.views.size());
  const json& ops = field(doc, "ops", "graph");
  if (!ops.is_array()) bad("ops", "expected a list");
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string w = fmt::format("ops[{}]", i);
    const json& o = ops[i];
    Op op;
    if (o.contains("pointwise")) {
      op.family = Op::Family::kPointwise;
      op.pointwise = pointwise(o.at("pointwise"), nv, w + ".pointwise");
    } else if (o.contains("reduce")) {
      const json& r = o.at("reduce");
      const std::string wr = w + ".reduce";
      op.family = Op::Family::kReduce;
      op.reduce.fn = enum_value<hw::ReduceFn>(field(r, "fn", wr), wr + ".fn");
      op.reduce.compute = dtype(field(r, "compute", wr), wr + ".compute");
      op.reduce.in = index(field(r, "in", wr), nv, wr + ".in");
      op.reduce.out = index(field(r, "out", wr), nv, wr + ".out");
      op.reduce.dims = integers(field(r, "dims", wr), wr + ".dims");
    } else if (o.contains("matmul")) {
      const json& m = o.at("matmul");
      const std::string wm = w + ".matmul";
      op.family = Op::Family::kMatmul;
      op.matmul.a = index(field(m, "a", wm), nv, wm + ".a");
      op.matmul.b = index(field(m, "b", wm), nv, wm + ".b");
      op.matmul.out = index(field(m, "out", wm), nv, wm + ".out");
      if (m.contains("bias")) op.matmul.bias = index(m.at("bias"), nv, wm + ".bias");
      if (m.contains("alpha")) op.matmul.alpha = number(m.at("alpha"), wm + ".alpha");
      if (m.contains("beta")) op.matmul.beta = number(m.at("beta"), wm + ".beta");
      op.matmul.compute = dtype(field(m, "compute", wm), wm + ".compute");
    } else if (o.contains("index")) {
      const json& x = o.at("index");
      const std::string wx = w + ".index";
      op.family = Op::Family::kIndex;
      op.index.kind = static_cast<Index::Kind>(index(field(x, "kind", wx), 4, wx + ".kind"));
      op.index.table = index(field(x, "table", wx), nv, wx + ".table");
      op.index.index = index(field(x, "index", wx), nv, wx + ".index");
      op.index.rows = index(field(x, "rows", wx), nv, wx + ".rows");
    } else {
      bad(w, "expected one of 'pointwise', 'reduce', 'matmul', 'index'");
    }
    g.ops.push_back(std::move(op));
  }
  return g;
}

}  // namespace spyre::compiler::ir
