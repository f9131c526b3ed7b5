// The KTIR lowering's core: the kernel's function read once per compute tile with that tile's id,
// every index evaluated as it is met (scf.for unrolled, scf.if decided), tensors placed in the
// scratchpad (a stack that each loop iteration pops), and loads and stores issued as asynchronous
// DMA whose tags are waited on only where an instruction touches their bytes.
#include "lower.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "spyre/compiler/errors.h"

namespace spyre::compiler::ktir {

int64_t TensorV::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

uint64_t integer_bits(double x, int line) {
  if (!(x >= -9.2e18 && x <= 9.2e18)) throw Malformed(fmt::format("ktir: line {}: {} is no integer", line, x));
  return static_cast<uint64_t>(static_cast<int64_t>(x));
}

hw::DType dtype_of(const std::string& name, int line) {
  if (name == "f32") return hw::DType::kF32;
  if (name == "f16") return hw::DType::kF16;
  if (name == "bf16") return hw::DType::kBF16;
  if (name == "i64" || name == "index") return hw::DType::kI64;
  if (name == "i32") return hw::DType::kI32;
  if (name == "i8") return hw::DType::kI8;
  if (name == "i1") return hw::DType::kBool;
  throw Unsupported(fmt::format("ktir: line {}: element type {} is not supported", line, name));
}

std::pair<std::vector<int64_t>, hw::DType> shaped(const std::string& type, int line) {
  const size_t open = type.find('<');
  if (open == std::string::npos)
    throw Malformed(fmt::format("ktir: line {}: expected a shaped type, found {}", line, type));
  std::string body = type.substr(open + 1, type.size() - open - 2);
  // memref<4x8xf16, #ktdp.memory_space<global>>: the layout and memory space follow a comma.
  int depth = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '<') ++depth;
    if (body[i] == '>') --depth;
    if (body[i] == ',' && depth == 0) {
      body.resize(i);
      break;
    }
  }
  std::vector<int64_t> shape;
  size_t at = body.find_first_not_of(' ');
  while (at < body.size() && (std::isdigit(static_cast<unsigned char>(body[at])) || body[at] == '?')) {
    if (body[at] == '?') throw Unsupported(fmt::format("ktir: line {}: a dynamic size in {}", line, type));
    size_t end = at;
    while (end < body.size() && std::isdigit(static_cast<unsigned char>(body[end]))) ++end;
    if (end >= body.size() || body[end] != 'x') break;  // a number that is no dim
    shape.push_back(to_int(body.substr(at, end - at), line));
    at = end + 1;
  }
  int64_t numel = 1;
  constexpr int64_t kMost = int64_t{1} << 40;
  for (int64_t d : shape) {
    const int64_t n = std::max<int64_t>(d, 1);
    if (d > (int64_t{1} << 31) || shape.size() > 8 || numel > kMost / n) {
      throw Unsupported(fmt::format("ktir: line {}: {} is larger than any kernel handles", line, type));
    }
    numel *= n;
  }
  std::string elem = body.substr(std::min(at, body.size()));
  elem.erase(std::remove(elem.begin(), elem.end(), ' '), elem.end());
  return {shape, dtype_of(elem, line)};
}

const Token* after(const Op& o, const std::string& word, size_t* index) {
  int depth = 0;
  for (size_t i = 0; i + 1 < o.tokens.size(); ++i) {
    const Token& t = o.tokens[i];
    if (depth == 0 && t.is(word)) {
      if (index) *index = i + 1;
      return &o.tokens[i + 1];
    }
    if (t.is("(") || t.is("[") || t.is("{")) ++depth;
    if (t.is(")") || t.is("]") || t.is("}")) --depth;
  }
  return nullptr;
}

std::vector<std::string> group(const Op& o, const std::string& word) {
  std::vector<std::string> out;
  size_t i = 0;
  if (!after(o, word, &i) || !o.tokens[i].is("(")) return out;
  for (++i; i < o.tokens.size() && !o.tokens[i].is(":") && !o.tokens[i].is(")"); ++i) {
    if (o.tokens[i].kind == Token::Kind::kValue) out.push_back(o.tokens[i].text);
  }
  return out;
}

std::vector<std::string> group_types(const Op& o, const std::string& word) {
  std::vector<std::string> out;
  size_t i = 0;
  if (!after(o, word, &i) || !o.tokens[i].is("(")) return out;
  while (i < o.tokens.size() && !o.tokens[i].is(":") && !o.tokens[i].is(")")) ++i;
  for (; i < o.tokens.size() && !o.tokens[i].is(")"); ++i) {
    const Token& t = o.tokens[i];
    if (t.kind == Token::Kind::kType || t.kind == Token::Kind::kIdent) out.push_back(t.text);
  }
  return out;
}

const Token* attribute(const Op& o, const std::string& key, const Module& m) {
  for (size_t i = 0; i + 2 < o.tokens.size(); ++i) {
    if (o.tokens[i].kind == Token::Kind::kIdent && o.tokens[i].text == key && o.tokens[i + 1].is("=")) {
      const Token* t = &o.tokens[i + 2];
      if (t->kind == Token::Kind::kAlias) {
        const auto a = m.aliases.find(t->text);
        if (a == m.aliases.end()) throw Malformed(fmt::format("ktir: line {}: unknown attribute {}", t->line, t->text));
        return &a->second;
      }
      return t;
    }
  }
  return nullptr;
}

std::vector<int64_t> int_list(const Op& o, const std::string& word) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < o.tokens.size() && !(o.tokens[i].kind == Token::Kind::kIdent && o.tokens[i].text == word)) ++i;
  if (++i >= o.tokens.size()) return out;
  if (o.tokens[i].is("=")) ++i;
  if (i >= o.tokens.size() || !o.tokens[i].is("[")) return out;
  for (++i; i < o.tokens.size() && !o.tokens[i].is("]"); ++i) {
    if (o.tokens[i].kind == Token::Kind::kNumber) out.push_back(to_int(o.tokens[i].text, o.tokens[i].line));
  }
  return out;
}

namespace {

// Every value an op reads, its regions' included.
void uses(const Op& o, std::vector<std::string>* out) {
  for (const Token& t : o.tokens) {
    if (t.kind == Token::Kind::kValue) out->push_back(t.text);
  }
  for (const Region& r : o.regions) {
    for (const Block& b : r.blocks) {
      for (const Op& inner : b.ops) uses(inner, out);
    }
  }
}

bool terminator(const std::string& name) {
  return name == "scf.yield" || name == "linalg.yield" || name == "ktdp.yield_partial" ||
         name == "ktdp.yield_reduced" || name == "func.return" || name == "return";
}

}  // namespace

std::vector<std::string> operands(const Op& o) {
  std::vector<std::string> out;
  for (const Token& t : o.tokens) {
    if (t.is(":")) break;
    if (t.kind == Token::Kind::kValue) out.push_back(t.text);
  }
  return out;
}

Lowering::Lowering(const Op& func, Shared* shared, int64_t rank) : func_(func), shared_(*shared), rank_(rank) {
  int64_t r = rank;
  tile_id_.assign(shared_.grid.size(), 0);
  for (size_t i = shared_.grid.size(); i-- > 0;) {
    tile_id_[i] = r % shared_.grid[i];
    r /= shared_.grid[i];
  }
  top_ = static_cast<uint32_t>(shared_.target->lx_bytes);
}

void Lowering::run() {
  line_ = func_.line;
  std::vector<std::string> names;
  std::vector<Value> args;
  for (size_t i = 0; i < shared_.arguments.size(); ++i) {
    emit(emit::arg(arg_reg(static_cast<int>(i)), static_cast<uint32_t>(i)));
    names.push_back(shared_.arguments[i].name);
    args.emplace_back(Ptr{static_cast<int>(i), 0});
  }
  if (func_.regions.empty() || func_.regions[0].blocks.empty()) {
    throw Malformed(fmt::format("ktir: line {}: the function has no body", func_.line));
  }
  block(func_.regions[0].blocks[0], names, args);
  if (!pending_.empty() || wait_ != 0) emit(emit::wait_tags(0xffff));
}

std::vector<Value> Lowering::block(const Block& b, const std::vector<std::string>& names,
                                   const std::vector<Value>& args) {
  Frame f;
  for (size_t i = 0; i < b.ops.size(); ++i) {
    std::vector<std::string> used;
    uses(b.ops[i], &used);
    for (const std::string& u : used) f.last_use[u] = i;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& name = i < b.args.size() ? b.args[i].first : i < names.size() ? names[i] : std::string();
    values_[name] = args[i];
    f.defined.insert(name);
  }
  frames_.push_back(&f);
  std::vector<Value> out;
  for (size_t i = 0; i < b.ops.size(); ++i) {
    f.at = i;
    const Op& o = b.ops[i];
    line_ = o.line;
    if (terminator(o.name)) {
      for (const std::string& v : operands(o)) out.push_back(value(v, o.line));
      break;
    }
    op(o);
    for (const std::string& r : o.results) f.defined.insert(r);
  }
  frames_.pop_back();
  return out;
}

Value& Lowering::value(const std::string& name, int line) {
  const auto v = values_.find(name);
  if (v == values_.end()) throw Malformed(fmt::format("ktir: line {}: {} is not defined", line, name));
  return v->second;
}

int64_t Lowering::integer(const std::string& name, int line) {
  if (!name.empty() && (std::isdigit(static_cast<unsigned char>(name[0])) || name[0] == '-')) return to_int(name, line);
  const Value& v = value(name, line);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (std::holds_alternative<Ptr>(v)) {
    throw Unsupported(fmt::format("ktir: line {}: {} is an address, used as an index", line, name));
  }
  throw Unsupported(fmt::format(
      "ktir: line {}: {} is not an index known when the kernel is compiled (a value loaded from memory cannot "
      "steer an address or a loop)",
      line, name));
}

double Lowering::scalar(const std::string& name, int line) {
  const Value& v = value(name, line);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  throw Unsupported(fmt::format("ktir: line {}: {} is not a scalar constant", line, name));
}

TensorV Lowering::tensor(const std::string& name, int line) {
  const Value& v = value(name, line);
  if (const auto* t = std::get_if<TensorV>(&v)) return *t;
  throw Malformed(fmt::format("ktir: line {}: {} is not a tensor", line, name));
}

void Lowering::define(const Op& o, std::vector<Value> results) {
  if (results.size() != o.results.size()) {
    throw Malformed(
        fmt::format("ktir: line {}: {} gives {} values, {} named", o.line, o.name, results.size(), o.results.size()));
  }
  for (size_t i = 0; i < results.size(); ++i) values_[o.results[i]] = std::move(results[i]);
}

bool Lowering::last_use(const std::string& name) const {
  if (frames_.empty()) return false;
  const Frame& f = *frames_.back();
  const auto u = f.last_use.find(name);
  return f.defined.count(name) && u != f.last_use.end() && u->second == f.at;
}

void Lowering::op(const Op& o) {
  const std::string& n = o.name;
  static const std::set<std::string> kInt = {
      "arith.addi",   "arith.subi",  "arith.muli",   "arith.divsi",      "arith.divui",      "arith.remsi",
      "arith.remui",  "arith.maxsi", "arith.minsi",  "arith.maxui",      "arith.minui",      "arith.cmpi",
      "arith.select", "arith.andi",  "arith.ori",    "arith.xori",       "arith.index_cast", "arith.index_castui",
      "arith.extsi",  "arith.extui", "arith.trunci", "arith.floordivsi", "arith.ceildivsi",  "affine.apply"};
  static const std::set<std::string> kBinary = {"arith.addf",     "arith.subf",     "arith.mulf",    "arith.divf",
                                                "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
                                                "math.powf",      "linalg.add",     "linalg.sub",    "linalg.mul",
                                                "linalg.div",     "linalg.max",     "linalg.min",    "linalg.powf"};
  static const std::set<std::string> kConvert = {"arith.truncf", "arith.extf", "arith.sitofp", "arith.fptosi"};
  if (n == "arith.constant") {
    constant(o);
  } else if (kInt.count(n) &&
             !(n == "arith.select" && !std::holds_alternative<int64_t>(value(operands(o)[1], o.line)))) {
    arith_int(o);
  } else if (kBinary.count(n)) {
    elementwise(o);
  } else if (kConvert.count(n)) {
    convert(o);
  } else if (n.rfind("math.", 0) == 0 || n == "arith.negf" || n == "linalg.exp" || n == "linalg.log" ||
             n == "linalg.abs" || n == "linalg.negf" || n == "linalg.sqrt" || n == "linalg.rsqrt" ||
             n == "linalg.reciprocal" || n == "linalg.tanh" || n == "linalg.erf" || n == "linalg.square" ||
             n == "linalg.floor" || n == "linalg.ceil" || n == "linalg.copy") {
    math_unary(o);
  } else if (n == "ktdp.get_compute_tile_id") {
    std::vector<Value> ids(tile_id_.begin(), tile_id_.end());
    if (o.results.size() == 1 && ids.size() > 1) ids = {Value(rank_)};  // a 1-D id over a bigger grid: the rank
    define(o, ids);
  } else if (n == "ktdp.construct_memory_view") {
    memory_view(o);
  } else if (n == "ktdp.construct_access_tile") {
    access_tile(o);
  } else if (n == "ktdp.construct_indirect_access_tile") {
    indirect_tile(o);
  } else if (n == "ktdp.load") {
    load(o);
  } else if (n == "ktdp.store") {
    store(o);
  } else if (n == "ktdp.inter_tile_produce") {
    produce(o);
  } else if (n == "ktdp.inter_tile_reduce") {
    inter_reduce(o);
  } else if (n == "tensor.empty") {
    const auto [shape, dtype] = shaped(o.last().text, o.line);
    TensorV t = new_tensor(shape, dtype, o.line);
    t.fresh = true;
    define(o, {t});
  } else if (n == "tensor.expand_shape" || n == "tensor.collapse_shape") {
    reshape(o);
  } else if (n == "linalg.fill") {
    fill(o);
  } else if (n == "linalg.matmul" || n == "linalg.batch_matmul") {
    matmul(o);
  } else if (n == "linalg.reduce") {
    reduce(o);
  } else if (n == "linalg.broadcast") {
    broadcast(o);
  } else if (n == "linalg.transpose") {
    transpose(o);
  } else if (n == "linalg.generic") {
    generic(o);
  } else if (n == "gpu.printf") {
    printf(o);
  } else if (n == "scf.for") {
    define(o, scf_for(o));
  } else if (n == "scf.if") {
    define(o, scf_if(o));
  } else {
    throw Unsupported(fmt::format("ktir: line {}: {} is not supported", o.line, n));
  }
}

void Lowering::constant(const Op& o) {
  const std::vector<Token>& t = o.tokens;
  const auto colon = std::find_if(t.begin(), t.end(), [](const Token& k) { return k.is(":"); });
  if (colon == t.begin() || colon == t.end() || colon + 1 == t.end()) {
    throw Malformed(fmt::format("ktir: line {}: expected 'arith.constant value : type'", o.line));
  }
  const Token& type = *(colon + 1);
  const bool negative = o.tok(0).is("-");
  const Token& v = o.tok(negative ? 1 : 0);
  const auto number = [&](const std::string& text, bool is_float) -> double {
    if (text == "true") return 1;
    if (text == "false") return 0;
    if (is_float && text.rfind("0x", 0) == 0) {  // a float written as its bits
      const auto bits = static_cast<uint32_t>(to_int(text, o.line));
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    return to_double(text, o.line);
  };
  if (type.kind == Token::Kind::kType) {  // dense<...> : tensor<...>: a splat
    const auto [shape, dtype] = shaped(type.text, o.line);
    const size_t open = v.text.find('<');
    const std::string inner = v.text.substr(open + 1, v.text.size() - open - 2);
    if (inner.find('[') != std::string::npos) {
      throw Unsupported(fmt::format("ktir: line {}: a dense constant that is not a splat", o.line));
    }
    TensorV x = new_tensor(shape, dtype, o.line);
    const double value = number(inner, hw::dtype_is_float(dtype));
    hw::Instr in =
        emit::sfp(hw::Op::kFill, dtype, 0, x.addr, 0,
                  hw::dtype_is_float(dtype) ? emit::double_bits(value) : integer_bits(value, o.line),
                  static_cast<uint32_t>(x.numel() / std::max<int64_t>(x.shape.empty() ? 1 : x.shape.back(), 1)),
                  static_cast<uint32_t>(x.shape.empty() ? 1 : x.shape.back()));
    if (x.numel() > 0) emit(in);
    x.zero = value == 0;
    define(o, {x});
    return;
  }
  const bool is_float = !type.text.empty() && (type.text[0] == 'f' || type.text == "bf16");
  if (!is_float && v.kind == Token::Kind::kNumber && v.text.find_first_of(".eE") == std::string::npos) {
    const int64_t i = to_int(v.text, o.line);  // integers exactly, not through a double
    define(o, {negative ? wrap_sub(0, i) : i});
    return;
  }
  const double x = (negative ? -1 : 1) * number(v.text, is_float);
  if (!is_float && !(x >= -9.2e18 && x <= 9.2e18)) {
    throw Malformed(fmt::format("ktir: line {}: {} is no {}", o.line, v.text, type.text));
  }
  define(o, {is_float ? Value(x) : Value(static_cast<int64_t>(x))});
}

void Lowering::arith_int(const Op& o) {
  const std::vector<std::string> in = operands(o);
  const std::string& n = o.name;
  const auto need = [&](size_t k) {
    if (in.size() < k) throw Malformed(fmt::format("ktir: line {}: {} takes {} operands", o.line, n, k));
  };
  if (n == "affine.apply") {  // affine.apply #map(%a)[%s]
    throw Unsupported(fmt::format("ktir: line {}: affine.apply is not supported (write the arith ops)", o.line));
  }
  if (n == "arith.index_cast" || n == "arith.index_castui" || n == "arith.extsi" || n == "arith.extui" ||
      n == "arith.trunci") {
    need(1);
    define(o, {value(in[0], o.line)});
    return;
  }
  if (n == "arith.select") {
    need(3);
    define(o, {integer(in[0], o.line) ? value(in[1], o.line) : value(in[2], o.line)});
    return;
  }
  if (n == "arith.cmpi") {
    need(2);
    const std::string pred = o.tok(0).text;
    const int64_t a = integer(in[0], o.line), b = integer(in[1], o.line);
    const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    int64_t r;
    if (pred == "eq")
      r = a == b;
    else if (pred == "ne")
      r = a != b;
    else if (pred == "slt")
      r = a < b;
    else if (pred == "sle")
      r = a <= b;
    else if (pred == "sgt")
      r = a > b;
    else if (pred == "sge")
      r = a >= b;
    else if (pred == "ult")
      r = ua < ub;
    else if (pred == "ule")
      r = ua <= ub;
    else if (pred == "ugt")
      r = ua > ub;
    else if (pred == "uge")
      r = ua >= ub;
    else
      throw Malformed(fmt::format("ktir: line {}: unknown predicate {}", o.line, pred));
    define(o, {r});
    return;
  }
  need(2);
  // Addresses: a pointer plus or minus an index stays a pointer.
  Value& va = value(in[0], o.line);
  Value& vb = value(in[1], o.line);
  if (std::holds_alternative<Ptr>(va) || std::holds_alternative<Ptr>(vb)) {
    const bool a_ptr = std::holds_alternative<Ptr>(va);
    Ptr p = a_ptr ? std::get<Ptr>(va) : std::get<Ptr>(vb);
    const int64_t k = integer(a_ptr ? in[1] : in[0], o.line);
    if (n == "arith.addi") {
      p.elems = wrap_add(p.elems, k);
    } else if (n == "arith.subi" && a_ptr) {
      p.elems = wrap_sub(p.elems, k);
    } else {
      throw Unsupported(fmt::format("ktir: line {}: {} of an address (only adding an index to one is)", o.line, n));
    }
    define(o, {p});
    return;
  }
  const int64_t a = integer(in[0], o.line), b = integer(in[1], o.line);
  const auto nonzero = [&] {
    if (b == 0) throw Malformed(fmt::format("ktir: line {}: {} by zero", o.line, n));
  };
  const auto fold = [&]() -> int64_t {
    if (n == "arith.addi") return wrap_add(a, b);
    if (n == "arith.subi") return wrap_sub(a, b);
    if (n == "arith.muli") return wrap_mul(a, b);
    if (n == "arith.maxsi" || n == "arith.maxui") return std::max(a, b);
    if (n == "arith.minsi" || n == "arith.minui") return std::min(a, b);
    if (n == "arith.andi") return a & b;
    if (n == "arith.ori") return a | b;
    if (n == "arith.xori") return a ^ b;
    nonzero();
    if (n == "arith.divsi" || n == "arith.divui") return b == -1 ? wrap_sub(0, a) : a / b;
    if (n == "arith.remsi" || n == "arith.remui") return b == -1 ? 0 : a % b;
    if (n == "arith.floordivsi") return floor_div(a, b, o.line);
    return wrap_sub(0, floor_div(wrap_sub(0, a), b, o.line));  // arith.ceildivsi
  };
  const int64_t r = fold();
  define(o, {r});
}

std::vector<Value> Lowering::scf_for(const Op& o) {
  const std::vector<Token>& t = o.tokens;
  if (t.size() < 7 || t[0].kind != Token::Kind::kValue || !t[1].is("=") || !t[3].is("to") || !t[5].is("step")) {
    throw Malformed(fmt::format("ktir: line {}: expected 'scf.for %i = %lb to %ub step %s'", o.line));
  }
  const int64_t lb = integer(t[2].text, o.line), ub = integer(t[4].text, o.line), step = integer(t[6].text, o.line);
  if (step <= 0) throw Malformed(fmt::format("ktir: line {}: scf.for with step {}", o.line, step));
  std::vector<std::string> names = {t[0].text};
  std::vector<Value> carried;
  std::set<uint32_t> taken;  // buffers an iter_arg took over: a second use of that init copies
  size_t i = 0;
  if (after(o, "iter_args", &i) && t[i].is("(")) {
    for (++i; i + 2 < t.size() && !t[i].is(")"); ++i) {
      if (t[i].kind != Token::Kind::kValue || !t[i + 1].is("=")) continue;
      names.push_back(t[i].text);
      const std::string& init = t[i + 2].text;
      Value v = value(init, o.line);
      if (auto* x = std::get_if<TensorV>(&v)) {
        if (!(last_use(init) && !x->shared && taken.insert(x->addr).second)) {  // else the loop copies it
          TensorV c = new_tensor(x->shape, x->dtype, o.line);
          copy(*x, c);
          c.zero = x->zero;
          v = c;
        }
        std::get<TensorV>(v).fresh = false;
      }
      carried.push_back(v);
      i += 2;
    }
  }
  if (o.regions.empty()) throw Malformed(fmt::format("ktir: line {}: scf.for without a body", o.line));
  const uint64_t trips =
      ub > lb ? (static_cast<uint64_t>(ub) - static_cast<uint64_t>(lb) - 1) / static_cast<uint64_t>(step) + 1 : 0;
  iterations_ += std::min(trips, kMaxIterations + 1);
  if (iterations_ > kMaxIterations) {
    throw Unsupported(
        fmt::format("ktir: line {}: the kernel's loops run more than {} iterations on one tile (they are "
                    "unrolled)",
                    o.line, kMaxIterations));
  }
  for (uint64_t trip = 0; trip < trips; ++trip) {
    const int64_t k = wrap_add(lb, wrap_mul(static_cast<int64_t>(trip), step));
    const uint32_t mark = top_;
    std::vector<Value> args = {Value(k)};
    args.insert(args.end(), carried.begin(), carried.end());
    const std::vector<Value> out = block(o.regions[0].blocks[0], names, args);
    if (out.size() != carried.size()) {
      throw Malformed(
          fmt::format("ktir: line {}: the loop yields {} values for {} iter_args", o.line, out.size(), carried.size()));
    }
    for (size_t c = 0; c < carried.size(); ++c) {
      if (auto* into = std::get_if<TensorV>(&carried[c])) {
        const auto* y = std::get_if<TensorV>(&out[c]);
        if (!y || y->shape != into->shape) {
          throw Malformed(fmt::format("ktir: line {}: iter_arg {} changes its type", o.line, names[c + 1]));
        }
        if (y->addr != into->addr) copy(*y, *into);
        into->zero = false;
      } else {
        carried[c] = out[c];
      }
    }
    top_ = mark;
  }
  return carried;
}

std::vector<Value> Lowering::scf_if(const Op& o) {
  const std::vector<std::string> in = operands(o);
  if (in.empty()) throw Malformed(fmt::format("ktir: line {}: scf.if without a condition", o.line));
  const bool taken = integer(in[0], o.line) != 0;
  const size_t r = taken ? 0 : 1;
  if (r >= o.regions.size() || o.regions[r].blocks.empty()) return {};
  return block(o.regions[r].blocks[0], {}, {});
}

// ---- memory ----

uint32_t Lowering::alloc(uint64_t bytes, int line) {
  const uint64_t size = std::max<uint64_t>((bytes + 63) / 64 * 64, 64);
  if (uint64_t{top_} < uint64_t{floor_} + size) {
    throw Unsupported(fmt::format(
        "ktir: line {}: the scratchpad is full: the tile's live tensors need more than its {} bytes (the kernel's "
        "tiles are too large for this card)",
        line, shared_.target->lx_bytes));
  }
  top_ -= static_cast<uint32_t>(size);
  before_write(top_, static_cast<uint32_t>(size));  // freed bytes may still be draining to memory
  return top_;
}

TensorV Lowering::new_tensor(std::vector<int64_t> shape, hw::DType dtype, int line) {
  TensorV t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.addr = alloc(static_cast<uint64_t>(t.numel()) * hw::dtype_size(dtype), line);
  return t;
}

void Lowering::emit(hw::Instr in) {
  if (code.size() >= kMaxInstructions) {
    throw Unsupported(fmt::format("ktir: line {}: the kernel unrolls to more than {} instructions on tile {}", line_,
                                  kMaxInstructions, rank_));
  }
  if (in.op == hw::Op::kWait) {
    in.a |= wait_;
  } else if (wait_ != 0) {  // the transfers whose bytes this instruction touches
    code.push_back(emit::wait_tags(wait_));
    lines.push_back(line_);
  }
  wait_ = 0;
  code.push_back(in);
  lines.push_back(line_);
}

void Lowering::retire(uint32_t mask) {
  wait_ |= mask;
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const Pending& p) { return mask >> p.tag & 1; }),
                 pending_.end());
}

uint32_t Lowering::load_tag() {
  const uint32_t tag = 2 + next_tag_++ % (hw::kNumDmaTags - 2);
  if (std::any_of(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.tag == tag; })) retire(1u << tag);
  return tag;
}

void Lowering::before_read(uint32_t addr, uint32_t bytes) {
  uint32_t mask = 0;
  for (const Pending& p : pending_) {
    if (!p.store && p.lo < addr + bytes && addr < p.hi) mask |= 1u << p.tag;
  }
  retire(mask);
}

void Lowering::before_write(uint32_t addr, uint32_t bytes) {
  uint32_t mask = 0;
  for (const Pending& p : pending_) {
    if (p.lo < addr + bytes && addr < p.hi) mask |= 1u << p.tag;
  }
  retire(mask);
}

void Lowering::memory_view(const Op& o) {
  const std::vector<Token>& t = o.tokens;
  ViewV v;
  const auto [type_shape, dtype] = shaped(o.last().text, o.line);
  v.dtype = dtype;
  const auto list = [&](const std::string& word) {
    std::vector<int64_t> out;
    size_t i = 0;
    if (!after(o, word, &i))
      throw Malformed(fmt::format("ktir: line {}: construct_memory_view without {}", o.line, word));
    if (t[i].is(":")) ++i;
    for (++i; i < t.size() && !t[i].is("]"); ++i) {
      if (!t[i].is(",")) out.push_back(integer(t[i].text, o.line));
    }
    return out;
  };
  v.sizes = list("sizes");
  v.strides = list("strides");
  if (v.sizes.size() != v.strides.size() || v.sizes != type_shape) {
    throw Malformed(fmt::format("ktir: line {}: the view's sizes [{}] disagree with its type {}", o.line,
                                fmt::join(v.sizes, ", "), o.last().text));
  }
  const Token* space = attribute(o, "memory_space", *shared_.module);
  const std::string s = space ? space->text : "global";
  if (s.find("ct_id") != std::string::npos || s.find("core") != std::string::npos) {
    throw Unsupported(fmt::format("ktir: line {}: a view of another tile's scratchpad ({})", o.line, s));
  }
  v.local = s.find("ct_local") != std::string::npos || s.find("LX") != std::string::npos;
  const uint32_t esz = hw::dtype_size(dtype);
  int64_t reach = 1;  // elements past the base the view spans
  for (size_t i = 0; i < v.sizes.size(); ++i) {
    if (v.sizes[i] < 1 || v.strides[i] < 0 || v.strides[i] > (int64_t{1} << 40)) {
      throw Unsupported(
          fmt::format("ktir: line {}: a view of size {} and stride {} in dim {} (sizes of at least one "
                      "and strides of at most 2^40, not negative, are taken)",
                      o.line, v.sizes[i], v.strides[i], i));
    }
    reach += (v.sizes[i] - 1) * v.strides[i];  // at most 2^31 * 2^40 per dim, and at most 8 dims
  }
  constexpr int64_t kMemory = int64_t{1} << 48;  // beyond any card's device memory
  const Value& base = t[0].kind == Token::Kind::kValue ? value(t[0].text, o.line) : Value(integer(t[0].text, o.line));
  if (v.local) {
    const int64_t at = integer(t[0].text, o.line);
    if (at < 0 || at > kMemory || (at + reach) * esz > static_cast<int64_t>(shared_.target->lx_bytes)) {
      throw Malformed(fmt::format("ktir: line {}: the ct_local view at element {} leaves the scratchpad", o.line, at));
    }
    v.lx = static_cast<uint32_t>(at * esz);
    floor_ = std::max<uint32_t>(floor_, static_cast<uint32_t>((at + reach) * esz));
    if (floor_ > top_) {
      throw Unsupported(
          fmt::format("ktir: line {}: the ct_local view reaches scratchpad byte {}, where the kernel's "
                      "tensors already are",
                      o.line, floor_));
    }
  } else {
    const auto* p = std::get_if<Ptr>(&base);
    if (!p) {
      throw Unsupported(fmt::format(
          "ktir: line {}: a memory view at an absolute address: pass the tensor's base as an index argument of the "
          "function",
          o.line));
    }
    v.base = *p;
    Argument& a = shared_.arguments[static_cast<size_t>(p->arg)];
    if (a.bytes == 0) a.dtype = dtype;
    if (p->elems < 0) throw Malformed(fmt::format("ktir: line {}: a view before its argument's base", o.line));
    if (p->elems > kMemory || reach > kMemory || (p->elems + reach) * esz > kMemory) {
      throw Malformed(fmt::format("ktir: line {}: a view reaching past any device memory", o.line));
    }
    a.bytes = std::max<uint64_t>(a.bytes, static_cast<uint64_t>(p->elems + reach) * esz);
  }
  define(o, {v});
}

void Lowering::access_tile(const Op& o) {
  const std::vector<Token>& t = o.tokens;
  if (t.size() < 2 || !t[1].is("[")) {
    throw Malformed(fmt::format("ktir: line {}: expected 'construct_access_tile %view[...]'", o.line));
  }
  const auto* view = std::get_if<ViewV>(&value(t[0].text, o.line));
  if (!view) throw Malformed(fmt::format("ktir: line {}: {} is not a memory view", o.line, t[0].text));
  TileV tile;
  tile.view = *view;
  size_t i = 2;
  const Lookup lookup = [&](const std::string& n) { return integer(n, o.line); };
  while (i < t.size() && !t[i].is("]")) {
    tile.origin.push_back(eval(parse_expr(t, &i), lookup));
    if (t[i].is(",")) ++i;
  }
  if (attribute(o, "base_map", *shared_.module)) {
    throw Unsupported(fmt::format("ktir: line {}: an access tile with a base_map", o.line));
  }
  if (const Token* order = attribute(o, "access_tile_order", *shared_.module)) {
    if (!parse_map(order->text, o.line).identity()) {
      throw Unsupported(fmt::format("ktir: line {}: an access_tile_order other than the identity", o.line));
    }
  }
  tile.shape = shaped(t.back().text, o.line).first;
  if (tile.origin.size() != view->sizes.size() || tile.shape.size() != view->sizes.size()) {
    throw Malformed(fmt::format("ktir: line {}: the access tile's rank differs from its view's", o.line));
  }
  if (const Token* set = attribute(o, "access_tile_set", *shared_.module)) {
    const auto b = box(parse_set(set->text, o.line), {}, fmt::format("line {}: access_tile_set", o.line));
    for (size_t d = 0; d < b.size() && d < tile.shape.size(); ++d) {
      const int64_t span = wrap_add(wrap_sub(b[d].second, b[d].first), 1);
      if (span != tile.shape[d]) {
        throw Malformed(fmt::format("ktir: line {}: the access_tile_set spans {} in dim {}, its type {}", o.line, span,
                                    d, tile.shape[d]));
      }
      tile.origin[d] = wrap_add(tile.origin[d], b[d].first);
    }
  }
  for (size_t d = 0; d < tile.shape.size(); ++d) {
    if (tile.origin[d] < 0 || tile.origin[d] > view->sizes[d] - tile.shape[d]) {
      throw Malformed(fmt::format("ktir: line {}: the access tile [{}] + [{}] leaves its view [{}] (tile {})", o.line,
                                  fmt::join(tile.origin, ", "), fmt::join(tile.shape, ", "),
                                  fmt::join(view->sizes, ", "), rank_));
    }
  }
  define(o, {tile});
}

void Lowering::load(const Op& o) {
  const auto* tile = std::get_if<TileV>(&value(o.tok(0).text, o.line));
  if (!tile) throw Malformed(fmt::format("ktir: line {}: ktdp.load of something that is no access tile", o.line));
  const auto [shape, dtype] = shaped(o.last().text, o.line);
  TensorV x = new_tensor(shape, dtype, o.line);
  int64_t n = 1;
  for (int64_t s : tile->shape) n *= s;
  if (n != x.numel() || dtype != tile->view.dtype) {
    throw Malformed(fmt::format("ktir: line {}: the loaded {} does not match the access tile [{}] of {}", o.line,
                                o.last().text, fmt::join(tile->shape, "x"), hw::dtype_name(tile->view.dtype)));
  }
  if (tile->indirect) {
    gather(*tile, x, o.line);
  } else {
    transfer(*tile, x, false, o.line);
  }
  define(o, {x});
}

void Lowering::store(const Op& o) {
  const std::vector<std::string> in = operands(o);
  if (in.size() != 2) throw Malformed(fmt::format("ktir: line {}: expected 'ktdp.store %data, %tile'", o.line));
  const TensorV x = tensor(in[0], o.line);
  const auto* tile = std::get_if<TileV>(&value(in[1], o.line));
  if (!tile) throw Malformed(fmt::format("ktir: line {}: ktdp.store into something that is no access tile", o.line));
  if (tile->indirect) throw Unsupported(fmt::format("ktir: line {}: a store through an indirect access tile", o.line));
  int64_t n = 1;
  for (int64_t s : tile->shape) n *= s;
  if (n != x.numel() || x.dtype != tile->view.dtype) {
    throw Malformed(fmt::format("ktir: line {}: the stored tensor does not match the access tile [{}] of {}", o.line,
                                fmt::join(tile->shape, "x"), hw::dtype_name(tile->view.dtype)));
  }
  transfer(*tile, x, true, o.line);
}

void Lowering::transfer(const TileV& t, const TensorV& x, bool to_device, int line) {
  if (x.numel() == 0) return;
  const ViewV& v = t.view;
  const uint32_t esz = hw::dtype_size(v.dtype);
  // Dims as (extent, view stride, scratchpad stride), extent-1 dims dropped, runs merged.
  struct Dim {
    int64_t extent, stride, lx;
  };
  std::vector<Dim> dims;
  int64_t lx_stride = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1) dims.insert(dims.begin(), Dim{t.shape[d], v.strides[d], lx_stride});
    lx_stride *= t.shape[d];
  }
  for (size_t d = dims.size(); d-- > 1;) {
    if (dims[d - 1].stride == dims[d].stride * dims[d].extent) {
      dims[d - 1] = Dim{dims[d - 1].extent * dims[d].extent, dims[d].stride, dims[d].lx};
      dims.erase(dims.begin() + static_cast<long>(d));
    }
  }
  if (dims.empty()) dims.push_back(Dim{1, 1, 1});
  int64_t start = 0;  // elements from the view's base
  for (size_t d = 0; d < t.origin.size(); ++d) start += t.origin[d] * v.strides[d];
  // The innermost dim is a row of bytes when contiguous, else each element is a row.
  const bool contiguous = dims.back().stride == 1;
  Dim cols = contiguous ? dims.back() : Dim{1, 1, 1};
  if (contiguous) dims.pop_back();
  Dim rows = dims.empty() ? Dim{1, 0, 0} : dims.back();
  if (!dims.empty()) dims.pop_back();
  const uint32_t row_bytes = static_cast<uint32_t>(cols.extent) * esz;
  std::vector<int64_t> idx(dims.size(), 0);
  auto& work = shared_.work;
  while (true) {
    int64_t elem = start, lx = 0;
    for (size_t d = 0; d < dims.size(); ++d) {
      elem += idx[d] * dims[d].stride;
      lx += idx[d] * dims[d].lx;
    }
    const auto lx_addr = static_cast<uint32_t>(x.addr + lx * esz);
    const auto nrows = static_cast<uint32_t>(rows.extent);
    const uint32_t bytes = nrows * row_bytes;
    if (v.local) {  // scratchpad to scratchpad: one SFP copy per row
      for (uint32_t r = 0; r < nrows; ++r) {
        const auto view_addr = static_cast<uint32_t>(v.lx + (elem + r * rows.stride) * esz);
        const uint32_t tensor_addr = lx_addr + r * row_bytes;
        const uint32_t src = to_device ? tensor_addr : view_addr, dst = to_device ? view_addr : tensor_addr;
        before_read(src, row_bytes);
        before_write(dst, row_bytes);
        emit(emit::sfp(hw::Op::kUnary, v.dtype, 0, dst, src, static_cast<uint64_t>(hw::UnaryFn::kCopy), 1,
                       static_cast<uint32_t>(cols.extent)));
        work.sfp_elements += static_cast<uint64_t>(cols.extent);
      }
    } else {
      uint32_t tag = 1;
      if (to_device) {
        before_read(lx_addr, bytes);
        work.store_bytes += bytes;
      } else {
        tag = load_tag();
        before_write(lx_addr, bytes);
        work.load_bytes += bytes;
      }
      emit(emit::dma(to_device ? hw::Op::kStore : hw::Op::kLoad, v.dtype, arg_reg(v.base.arg), 0, lx_addr,
                     static_cast<uint64_t>((v.base.elems + elem) * esz), static_cast<uint64_t>(rows.stride * esz),
                     nrows, row_bytes, true, tag));
      pending_.push_back(Pending{lx_addr, lx_addr + bytes, tag, to_device});
    }
    size_t d = dims.size();
    while (d > 0 && ++idx[d - 1] == dims[d - 1].extent) idx[--d] = 0;
    if (d == 0) break;
  }
  (void)line;
}

// ---- the kernel ----

Kernel compile(std::string_view text, const Target& target, const std::string& function) {
  const Module m = parse(text);
  std::vector<const Op*> funcs;
  for (const Op& o : m.ops) {
    if (o.name == "func.func") funcs.push_back(&o);
    if (o.name == "module" && !o.regions.empty()) {
      for (const Block& b : o.regions[0].blocks) {
        for (const Op& inner : b.ops) {
          if (inner.name == "func.func") funcs.push_back(&inner);
        }
      }
    }
  }
  const auto name_of = [](const Op& f) {
    for (const Token& t : f.tokens) {
      if (t.kind == Token::Kind::kSymbol) return t.text.substr(1);
    }
    return std::string();
  };
  const Op* func = nullptr;
  for (const Op* f : funcs) {
    if (function.empty() ? (func == nullptr || (attribute(*f, "grid", m) && !attribute(*func, "grid", m)))
                         : name_of(*f) == function) {
      func = f;
    }
  }
  if (!func) {
    throw Malformed(function.empty() ? std::string("ktir: the text has no func.func")
                                     : fmt::format("ktir: no function named {}", function));
  }
  Kernel k;
  k.function = name_of(*func);
  Shared shared;
  shared.module = &m;
  shared.target = &target;
  // The signature: (%a: index, ...) after the symbol.
  size_t i = 0;
  while (i < func->tokens.size() && func->tokens[i].kind != Token::Kind::kSymbol) ++i;
  if (i + 1 < func->tokens.size() && func->tokens[i + 1].is("(")) {
    for (i += 2; i + 2 < func->tokens.size() && !func->tokens[i].is(")"); ++i) {
      const Token& t = func->tokens[i];
      if (t.kind != Token::Kind::kValue) continue;
      const std::string& type = func->tokens[i + 2].text;
      if (type != "index") {
        throw Unsupported(
            fmt::format("ktir: line {}: argument {} is a {}: only index arguments (tensor base "
                        "addresses) are taken",
                        t.line, t.text, type));
      }
      shared.arguments.push_back(Argument{t.text, hw::DType::kF32, 0});
      i += 2;
    }
  }
  if (shared.arguments.size() > 12) {
    throw Unsupported(fmt::format("ktir: {} takes {} arguments; at most 12 are", k.function, shared.arguments.size()));
  }
  shared.grid = int_list(*func, "grid");
  if (shared.grid.empty()) shared.grid = {1};
  int64_t tiles = 1;
  for (int64_t g : shared.grid) {
    if (g < 1) throw Malformed(fmt::format("ktir: {}: grid [{}]", k.function, fmt::join(shared.grid, ", ")));
    tiles = g > target.cores ? int64_t{target.cores} + 1 : std::min<int64_t>(tiles * g, int64_t{target.cores} + 1);
  }
  if (tiles > target.cores) {
    throw Unsupported(fmt::format("ktir: {}: grid [{}] has more tiles than the card's {} cores", k.function,
                                  fmt::join(shared.grid, ", "), target.cores));
  }
  std::vector<std::vector<hw::Instr>> per_core;
  for (int64_t r = 0; r < tiles; ++r) {
    Lowering l(*func, &shared, r);
    l.run();
    per_core.push_back(std::move(l.code));
    k.source_lines.push_back(std::move(l.lines));
  }
  k.grid = shared.grid;
  k.arguments = shared.arguments;
  k.workspace_bytes = shared.workspace_bytes;
  k.work = shared.work;
  const auto num_args = static_cast<uint32_t>(k.arguments.size() + (k.workspace_bytes ? 1 : 0));
  k.program = assemble(fmt::format("ktir {} grid [{}]", k.function, fmt::join(k.grid, "x")), per_core, num_args,
                       shared.strings);
  const double cores = static_cast<double>(tiles);
  const double memory = static_cast<double>(k.work.load_bytes + k.work.store_bytes) / target.load_bytes_per_cycle();
  const double pt =
      (static_cast<double>(k.work.macs - k.work.fp32_macs) + static_cast<double>(k.work.fp32_macs) / target.fp32_rate) /
      (target.pt_macs_per_cycle() * cores);
  const double sfp = static_cast<double>(k.work.sfp_elements) / (static_cast<double>(target.sfp_lanes) * cores);
  k.roofline_cycles = std::max({memory, pt, sfp});
  return k;
}

std::string listing(const Kernel& k, std::string_view text) {
  std::vector<std::string_view> source;
  for (size_t at = 0; at <= text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    source.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  const auto* header = reinterpret_cast<const hw::ProgramHeader*>(k.program.image.data());
  const auto* entries = reinterpret_cast<const uint32_t*>(k.program.image.data() + sizeof(hw::ProgramHeader));
  const auto* code = reinterpret_cast<const hw::Instr*>(k.program.image.data() + header->instr_offset);
  std::string out = fmt::format("; {}: {} arguments, workspace {} bytes, roofline {:.0f} cycles\n", k.program.name,
                                k.arguments.size(), k.workspace_bytes, k.roofline_cycles);
  for (size_t core = 0; core < k.source_lines.size(); ++core) {
    out += fmt::format("core {}:\n", core);
    int last = -1;
    const std::vector<int>& lines = k.source_lines[core];
    for (size_t j = 0; j <= lines.size(); ++j) {  // the assembler's END closes each stream
      const int line = j < lines.size() ? lines[j] : 0;
      if (line != last && j < lines.size()) {
        std::string_view s = line >= 1 && static_cast<size_t>(line) <= source.size() ? source[line - 1] : "";
        s.remove_prefix(std::min(s.find_first_not_of(' '), s.size()));
        out += fmt::format("  ; line {}: {}\n", line, s);
        last = line;
      }
      out += fmt::format("  {:5}  {}\n", entries[core] + j, disassemble(code[entries[core] + j]));
    }
  }
  return out;
}

}  // namespace spyre::compiler::ktir
