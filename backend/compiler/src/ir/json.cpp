// A graph from its JSON form: how the torch.compile front door (Python) hands the compiler a graph.
// Every field is checked as it is read, so a malformed document is an std::invalid_argument naming
// the field, never a graph the lowerings have to distrust.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "json_read.h"
#include "spyre/compiler/errors.h"
#include "spyre/compiler/ir.h"
#include "spyre/hw/commands.h"

namespace spyre::compiler::json_read {

void bad(const std::string& where, const std::string& what) {
  throw Malformed(fmt::format("graph json: {}: {}", where, what));
}

json parse(std::string_view text) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    bad("document", e.what());
  }
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

void read_views(const json& doc, ir::Graph& g, uint64_t max_args) {
  const int64_t num_args = integer(field(doc, "num_args", "graph"), "num_args");
  if (num_args < 0 || static_cast<uint64_t>(num_args) > max_args)
    bad("num_args", fmt::format("{} is not in [0, {}]", num_args, max_args));
  g.num_args = static_cast<uint32_t>(num_args);
  const json& views = field(doc, "views", "graph");
  if (!views.is_array()) bad("views", "expected a list");
  for (size_t i = 0; i < views.size(); ++i) {
    const std::string w = fmt::format("views[{}]", i);
    ir::View v;
    v.arg = index(field(views[i], "arg", w), g.num_args, w + ".arg");
    v.offset = integer(field(views[i], "offset", w), w + ".offset");
    v.sizes = integers(field(views[i], "sizes", w), w + ".sizes");
    v.strides = integers(field(views[i], "strides", w), w + ".strides");
    v.dtype = dtype(field(views[i], "dtype", w), w + ".dtype");
    if (v.sizes.size() != v.strides.size()) bad(w, "sizes and strides differ in length");
    g.add_view(std::move(v));
  }
}

}  // namespace spyre::compiler::json_read

namespace spyre::compiler::ir {
namespace {

using namespace json_read;  // NOLINT(google-build-using-namespace): this file is the reader's other half

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
      p.inputs.push_back(inputs[i].contains("int") ? Operand::constant_int(integer(inputs[i].at("int"), w + ".int"))
                                                   : Operand::constant(number(field(inputs[i], "scalar", w), w)));
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
    } else if (k == "fma") {
      step.kind = PointwiseKind::kFma, arity = 3;
    } else if (k == "fill") {
      step.kind = PointwiseKind::kFill;
      step.start = number(field(s, "value", w), w + ".value");
      step.start_int = s.contains("int") ? std::optional(integer(s.at("int"), w + ".int")) : Operand::exact(step.start);
    } else if (k == "reduce") {
      step.kind = PointwiseKind::kReduce, arity = 1;
      step.reduce = enum_value<hw::ReduceFn>(field(s, "fn", w), w + ".fn");
    } else if (k == "round") {
      step.kind = PointwiseKind::kRound, arity = 1;
      step.to = dtype(field(s, "to", w), w + ".to");
      if (step.to != hw::DType::kF16 && step.to != hw::DType::kBF16) bad(w + ".to", "a step rounds to f16 or bf16");
    } else if (k == "rotate_half") {
      step.kind = PointwiseKind::kRotateHalf, arity = 1;
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
  const json doc = parse(text);
  Graph g;
  read_views(doc, g);
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
      if (m.contains("activation")) {
        op.matmul.activation = enum_value<hw::UnaryFn>(m.at("activation"), wm + ".activation");
      }
      if (m.contains("residual")) op.matmul.residual = index(m.at("residual"), nv, wm + ".residual");
      if (m.contains("residual_fn")) {
        op.matmul.residual_fn = enum_value<hw::BinaryFn>(m.at("residual_fn"), wm + ".residual_fn");
      }
    } else if (o.contains("index")) {
      const json& x = o.at("index");
      const std::string wx = w + ".index";
      op.family = Op::Family::kIndex;
      op.index.kind = static_cast<Index::Kind>(index(field(x, "kind", wx), 6, wx + ".kind"));
      op.index.table = index(field(x, "table", wx), nv, wx + ".table");
      op.index.index = index(field(x, "index", wx), nv, wx + ".index");
      op.index.rows = index(field(x, "rows", wx), nv, wx + ".rows");
    } else if (o.contains("scan")) {
      const json& x = o.at("scan");
      const std::string wx = w + ".scan";
      op.family = Op::Family::kScan;
      op.scan.fn = enum_value<hw::ScanFn>(field(x, "fn", wx), wx + ".fn");
      op.scan.compute = dtype(field(x, "compute", wx), wx + ".compute");
      op.scan.in = index(field(x, "in", wx), nv, wx + ".in");
      op.scan.out = index(field(x, "out", wx), nv, wx + ".out");
    } else if (o.contains("sort")) {
      const json& x = o.at("sort");
      const std::string wx = w + ".sort";
      op.family = Op::Family::kSort;
      op.sort.in = index(field(x, "in", wx), nv, wx + ".in");
      op.sort.values = index(field(x, "values", wx), nv, wx + ".values");
      op.sort.indices = index(field(x, "indices", wx), nv, wx + ".indices");
      const json& d = field(x, "descending", wx);
      if (!d.is_boolean()) bad(wx + ".descending", "expected a bool");
      op.sort.descending = d.get<bool>();
    } else if (o.contains("attention")) {
      const json& x = o.at("attention");
      const std::string wx = w + ".attention";
      op.family = Op::Family::kAttention;
      op.attention.q = index(field(x, "q", wx), nv, wx + ".q");
      op.attention.k = index(field(x, "k", wx), nv, wx + ".k");
      op.attention.v = index(field(x, "v", wx), nv, wx + ".v");
      op.attention.out = index(field(x, "out", wx), nv, wx + ".out");
      if (x.contains("lse")) op.attention.lse = index(x.at("lse"), nv, wx + ".lse");
      if (x.contains("bias")) op.attention.bias = index(x.at("bias"), nv, wx + ".bias");
      if (x.contains("causal")) {
        if (!x.at("causal").is_boolean()) bad(wx + ".causal", "expected a bool");
        op.attention.causal = x.at("causal").get<bool>();
      }
      op.attention.scale = number(field(x, "scale", wx), wx + ".scale");
    } else {
      bad(w, "expected one of 'pointwise', 'reduce', 'matmul', 'index', 'scan', 'sort', 'attention'");
    }
    g.ops.push_back(std::move(op));
  }
  return g;
}

}  // namespace spyre::compiler::ir

namespace spyre::compiler::ir {
namespace {

json num(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

json step_json(const Step& st) {
  json j;
  switch (st.kind) {
    case PointwiseKind::kCopy:
      j["kind"] = "copy";
      break;
    case PointwiseKind::kUnary:
      j["kind"] = "unary";
      j["fn"] = static_cast<int>(st.unary);
      break;
    case PointwiseKind::kBinary:
      j["kind"] = "binary";
      j["fn"] = static_cast<int>(st.binary);
      break;
    case PointwiseKind::kSelect:
      j["kind"] = "select";
      break;
    case PointwiseKind::kFma:
      j["kind"] = "fma";
      break;
    case PointwiseKind::kFill:
      j["kind"] = "fill";
      j["value"] = num(st.start);
      if (st.start_int) j["int"] = *st.start_int;
      break;
    case PointwiseKind::kIota:
      j["kind"] = "iota";
      j["start"] = num(st.start);
      j["step"] = num(st.step);
      break;
    case PointwiseKind::kRandom:
      j["kind"] = "random";  // not read back: random ops are eager only
      break;
    case PointwiseKind::kReduce:
      j["kind"] = "reduce";
      j["fn"] = static_cast<int>(st.reduce);
      break;
    case PointwiseKind::kRotateHalf:
      j["kind"] = "rotate_half";
      break;
    case PointwiseKind::kRound:
      j["kind"] = "round";
      j["to"] = hw::dtype_name(st.to);
      break;
  }
  if (!st.args.empty()) j["args"] = st.args;
  return j;
}

}  // namespace

std::string graph_to_json(const Graph& g) {
  json doc;
  doc["num_args"] = g.num_args;
  doc["views"] = json::array();
  for (const View& v : g.views) {
    doc["views"].push_back({{"arg", v.arg},
                            {"offset", v.offset},
                            {"sizes", v.sizes},
                            {"strides", v.strides},
                            {"dtype", hw::dtype_name(v.dtype)}});
  }
  doc["ops"] = json::array();
  for (const Op& op : g.ops) {
    json o;
    switch (op.family) {
      case Op::Family::kPointwise: {
        const Pointwise& p = op.pointwise;
        json inputs = json::array();
        for (const Operand& x : p.inputs) {
          if (x.kind == Operand::Kind::kView) {
            inputs.push_back({{"view", x.view}});
          } else {
            json c = {{"scalar", num(x.scalar)}};
            if (x.integer) c["int"] = *x.integer;
            inputs.push_back(c);
          }
        }
        json steps = json::array();
        for (const Step& st : p.expression()) steps.push_back(step_json(st));
        o["pointwise"] = {{"compute", hw::dtype_name(p.compute)}, {"inputs", inputs}, {"out", p.out}, {"steps", steps}};
        break;
      }
      case Op::Family::kReduce:
        o["reduce"] = {{"fn", static_cast<int>(op.reduce.fn)},
                       {"compute", hw::dtype_name(op.reduce.compute)},
                       {"in", op.reduce.in},
                       {"out", op.reduce.out},
                       {"dims", op.reduce.dims}};
        break;
      case Op::Family::kMatmul: {
        const Matmul& m = op.matmul;
        o["matmul"] = {{"a", m.a},
                       {"b", m.b},
                       {"out", m.out},
                       {"alpha", num(m.alpha)},
                       {"beta", num(m.beta)},
                       {"compute", hw::dtype_name(m.compute)}};
        if (m.bias >= 0) o["matmul"]["bias"] = m.bias;
        if (m.activation != hw::UnaryFn::kCopy) o["matmul"]["activation"] = static_cast<int>(m.activation);
        if (m.residual >= 0) {
          o["matmul"]["residual"] = m.residual;
          o["matmul"]["residual_fn"] = static_cast<int>(m.residual_fn);
        }
        break;
      }
      case Op::Family::kIndex:
        o["index"] = {{"kind", static_cast<int>(op.index.kind)},
                      {"table", op.index.table},
                      {"index", op.index.index},
                      {"rows", op.index.rows}};
        break;
      case Op::Family::kScan:
        o["scan"] = {{"fn", static_cast<int>(op.scan.fn)},
                     {"compute", hw::dtype_name(op.scan.compute)},
                     {"in", op.scan.in},
                     {"out", op.scan.out}};
        break;
      case Op::Family::kSort:
        o["sort"] = {{"in", op.sort.in},
                     {"values", op.sort.values},
                     {"indices", op.sort.indices},
                     {"descending", op.sort.descending}};
        break;
      case Op::Family::kAttention: {
        const Attention& a = op.attention;
        o["attention"] = {{"q", a.q},     {"k", a.k},           {"v", a.v},
                          {"out", a.out}, {"causal", a.causal}, {"scale", num(a.scale)}};
        if (a.lse >= 0) o["attention"]["lse"] = a.lse;
        if (a.bias >= 0) o["attention"]["bias"] = a.bias;
        break;
      }
    }
    doc["ops"].push_back(std::move(o));
  }
  return doc.dump();
}

}  // namespace spyre::compiler::ir
