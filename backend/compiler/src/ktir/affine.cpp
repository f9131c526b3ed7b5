// Affine expressions: a recursive-descent reader over KTIR tokens, evaluation, and the box a set
// of single-dim bounds describes.
#include "affine.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "spyre/compiler/errors.h"

namespace spyre::compiler::ktir {
namespace {

int line_of(const std::vector<Token>& t, size_t at) {
  return t.empty() ? 0 : t[std::min(at, t.size() - 1)].line;
}

Expr binary(Expr::Kind k, Expr a, Expr b) {
  Expr e;
  e.kind = k;
  e.args.push_back(std::move(a));
  e.args.push_back(std::move(b));
  return e;
}

// Nesting of one expression being read (parentheses and signs recurse).
thread_local int g_depth = 0;
struct Nest {
  explicit Nest(int line) {
    if (++g_depth > 200) {
      g_depth = 0;
      throw Malformed(fmt::format("ktir: line {}: an expression nested more than 200 deep", line));
    }
  }
  ~Nest() { g_depth = std::max(g_depth - 1, 0); }
  Nest(const Nest&) = delete;
  Nest& operator=(const Nest&) = delete;
};

Expr factor(const std::vector<Token>& t, size_t* at) {
  if (*at >= t.size()) throw Malformed(fmt::format("ktir: line {}: an expression ends early", line_of(t, *at)));
  const Nest nest(t[*at].line);
  const Token& k = t[*at];
  if (k.is("-")) {
    ++*at;
    Expr e;
    e.kind = Expr::Kind::kNeg;
    e.args.push_back(factor(t, at));
    return e;
  }
  if (k.is("(")) {
    ++*at;
    Expr e = parse_expr(t, at);
    if (*at >= t.size() || !t[*at].is(")")) {
      throw Malformed(fmt::format("ktir: line {}: expected ')' in an expression", line_of(t, *at)));
    }
    ++*at;
    return e;
  }
  if (k.kind == Token::Kind::kNumber) {
    ++*at;
    Expr e;
    e.value = to_int(k.text, k.line);
    return e;
  }
  if (k.kind == Token::Kind::kValue || k.kind == Token::Kind::kIdent) {
    ++*at;
    Expr e;
    e.kind = Expr::Kind::kName;
    e.name = k.text;
    if (*at < t.size() && t[*at].is("[")) {  // an indirect term: %IDX[%m, %k]
      e.kind = Expr::Kind::kIndexed;
      ++*at;
      while (*at < t.size() && !t[*at].is("]")) {
        e.args.push_back(parse_expr(t, at));
        if (*at < t.size() && t[*at].is(",")) ++*at;
      }
      ++*at;
    }
    return e;
  }
  throw Malformed(fmt::format("ktir: line {}: unexpected '{}' in an expression", k.line, k.text));
}

Expr term(const std::vector<Token>& t, size_t* at) {
  Expr e = factor(t, at);
  while (*at < t.size()) {
    const Token& k = t[*at];
    Expr::Kind kind;
    if (k.is("*")) {
      kind = Expr::Kind::kMul;
    } else if (k.is("/") || k.is("floordiv")) {
      kind = Expr::Kind::kFloorDiv;
    } else if (k.is("ceildiv")) {
      kind = Expr::Kind::kCeilDiv;
    } else if (k.is("%") || k.is("mod")) {
      kind = Expr::Kind::kMod;
    } else {
      break;
    }
    ++*at;
    e = binary(kind, std::move(e), factor(t, at));
  }
  return e;
}

// Names and the comma-separated list in `(...)`: "(d0, d1)".
std::vector<std::string> names(const std::vector<Token>& t, size_t* at) {
  std::vector<std::string> out;
  if (*at >= t.size() || !(t[*at].is("(") || t[*at].is("["))) return out;
  const std::string close = t[*at].is("(") ? ")" : "]";
  ++*at;
  while (*at < t.size() && !t[*at].is(close)) {
    if (!t[*at].is(",")) out.push_back(t[*at].text);
    ++*at;
  }
  ++*at;
  return out;
}

// The tokens inside an attribute's outer <...>.
std::vector<Token> inner(const std::string& text, int line) {
  const size_t open = text.find('<');
  if (open == std::string::npos || text.back() != '>') {
    throw Malformed(fmt::format("ktir: line {}: expected an affine attribute, found '{}'", line, text));
  }
  std::vector<Token> t = tokenize(std::string_view(text).substr(open + 1, text.size() - open - 2));
  for (Token& k : t) k.line = line;
  return t;
}

void constraint(Set* s, Expr lhs, const std::string& op, Expr rhs) {
  if (op == ">=") {
    s->constraints.emplace_back(binary(Expr::Kind::kSub, std::move(lhs), std::move(rhs)), false);
  } else if (op == "<=") {
    s->constraints.emplace_back(binary(Expr::Kind::kSub, std::move(rhs), std::move(lhs)), false);
  } else if (op == "<") {  // a < b is b - a - 1 >= 0
    Expr one;
    one.value = 1;
    s->constraints.emplace_back(
        binary(Expr::Kind::kSub, binary(Expr::Kind::kSub, std::move(rhs), std::move(lhs)), std::move(one)), false);
  } else {
    s->constraints.emplace_back(binary(Expr::Kind::kSub, std::move(lhs), std::move(rhs)), true);
  }
}

// A linear form of the dims (symbols already substituted): coefficient per dim and a constant.
struct Linear {
  std::vector<int64_t> coef;
  int64_t constant = 0;
};

Linear linear(const Expr& e, const Set& s, const std::vector<int64_t>& syms, const std::string& what) {
  Linear out;
  out.coef.assign(s.dims.size(), 0);
  const auto both = [&](int64_t sign) {
    Linear a = linear(e.args[0], s, syms, what), b = linear(e.args[1], s, syms, what);
    for (size_t i = 0; i < a.coef.size(); ++i) a.coef[i] = wrap_add(a.coef[i], wrap_mul(sign, b.coef[i]));
    a.constant = wrap_add(a.constant, wrap_mul(sign, b.constant));
    return a;
  };
  const auto is_const = [](const Linear& l) {
    return std::all_of(l.coef.begin(), l.coef.end(), [](int64_t c) { return c == 0; });
  };
  switch (e.kind) {
    case Expr::Kind::kConst:
      out.constant = e.value;
      return out;
    case Expr::Kind::kName: {
      for (size_t i = 0; i < s.dims.size(); ++i) {
        if (s.dims[i] == e.name) return out.coef[i] = 1, out;
      }
      for (size_t i = 0; i < s.syms.size() && i < syms.size(); ++i) {
        if (s.syms[i] == e.name) return out.constant = syms[i], out;
      }
      throw Malformed(fmt::format("ktir: {}: unknown name '{}' in an affine set", what, e.name));
    }
    case Expr::Kind::kAdd:
      return both(1);
    case Expr::Kind::kSub:
      return both(-1);
    case Expr::Kind::kNeg: {
      Linear a = linear(e.args[0], s, syms, what);
      for (int64_t& c : a.coef) c = wrap_sub(0, c);
      a.constant = wrap_sub(0, a.constant);
      return a;
    }
    case Expr::Kind::kMul: {
      Linear a = linear(e.args[0], s, syms, what), b = linear(e.args[1], s, syms, what);
      if (!is_const(a) && !is_const(b)) break;
      if (is_const(a)) std::swap(a, b);
      for (int64_t& c : a.coef) c = wrap_mul(c, b.constant);
      a.constant = wrap_mul(a.constant, b.constant);
      return a;
    }
    default: {
      Linear a = linear(e.args[0], s, syms, what), b = linear(e.args[1], s, syms, what);
      if (!is_const(a) || !is_const(b)) break;
      Expr folded;
      folded.kind = e.kind;
      Expr x, y;
      x.value = a.constant;
      y.value = b.constant;
      folded.args = {x, y};
      out.constant = eval(folded, [](const std::string&) -> int64_t { return 0; });
      return out;
    }
  }
  throw Unsupported(fmt::format("ktir: {}: a non-linear bound in an affine set", what));
}

}  // namespace

int64_t floor_div(int64_t a, int64_t b, int line) {
  if (b == 0) throw Malformed(fmt::format("ktir: line {}: division by zero in an affine expression", line));
  if (b == -1) return wrap_sub(0, a);  // INT64_MIN / -1 wraps
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

Expr parse_expr(const std::vector<Token>& t, size_t* at) {
  Expr e = term(t, at);
  while (*at < t.size() && (t[*at].is("+") || t[*at].is("-"))) {
    const Expr::Kind kind = t[*at].is("+") ? Expr::Kind::kAdd : Expr::Kind::kSub;
    ++*at;
    e = binary(kind, std::move(e), term(t, at));
  }
  return e;
}

int64_t eval(const Expr& e, const Lookup& lookup) {
  const auto arg = [&](size_t i) { return eval(e.args[i], lookup); };
  switch (e.kind) {
    case Expr::Kind::kConst:
      return e.value;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kAdd:
      return wrap_add(arg(0), arg(1));
    case Expr::Kind::kSub:
      return wrap_sub(arg(0), arg(1));
    case Expr::Kind::kMul:
      return wrap_mul(arg(0), arg(1));
    case Expr::Kind::kNeg:
      return wrap_sub(0, arg(0));
    case Expr::Kind::kFloorDiv:
      return floor_div(arg(0), arg(1), 0);
    case Expr::Kind::kCeilDiv:
      return wrap_sub(0, floor_div(wrap_sub(0, arg(0)), arg(1), 0));
    case Expr::Kind::kMod: {
      const int64_t a = arg(0), b = arg(1);
      return wrap_sub(a, wrap_mul(floor_div(a, b, 0), b));
    }
    case Expr::Kind::kIndexed: {
      std::string key = e.name + "[";
      for (size_t i = 0; i < e.args.size(); ++i) key += (i ? "," : "") + std::to_string(arg(i));
      return lookup(key + "]");
    }
  }
  return 0;
}

Set parse_set(const std::string& text, int line) {
  Set s;
  std::vector<Token> t;
  const bool brace = !text.empty() && text.front() == '{';
  if (brace) {
    t = tokenize(std::string_view(text).substr(1, text.size() - 2));
    for (Token& k : t) k.line = line;
  } else {
    t = inner(text, line);
  }
  size_t at = 0;
  s.dims = names(t, &at);
  if (at < t.size() && t[at].is("[")) s.syms = names(t, &at);
  if (at >= t.size() || !(t[at].is(":") || t[at].is("|"))) {
    throw Malformed(fmt::format("ktir: line {}: expected ':' in an affine set", line));
  }
  ++at;
  if (!brace) {
    if (at >= t.size() || !t[at].is("(")) throw Malformed(fmt::format("ktir: line {}: expected '(' in a set", line));
    ++at;
  }
  while (at < t.size() && !t[at].is(")")) {
    Expr lhs = parse_expr(t, &at);
    while (at < t.size() && (t[at].is(">=") || t[at].is("<=") || t[at].is("==") || t[at].is("<"))) {
      const std::string op = t[at].text;
      ++at;
      Expr rhs = parse_expr(t, &at);
      constraint(&s, lhs, op, rhs);
      lhs = std::move(rhs);  // chains: 0 <= d0 < 2
    }
    if (at < t.size() && t[at].is(",")) ++at;
  }
  return s;
}

Map parse_map(const std::string& text, int line) {
  Map m;
  const std::vector<Token> t = inner(text, line);
  size_t at = 0;
  m.dims = names(t, &at);
  if (at < t.size() && t[at].is("[")) m.syms = names(t, &at);
  if (at + 1 >= t.size() || !t[at].is("->") || !t[at + 1].is("(")) {
    throw Malformed(fmt::format("ktir: line {}: expected '-> (' in an affine map", line));
  }
  at += 2;
  while (at < t.size() && !t[at].is(")")) {
    m.results.push_back(parse_expr(t, &at));
    if (at < t.size() && t[at].is(",")) ++at;
  }
  return m;
}

std::vector<int> Map::projection() const {
  std::vector<int> out;
  for (const Expr& e : results) {
    if (e.kind == Expr::Kind::kConst && e.value == 0) {
      out.push_back(-1);
      continue;
    }
    const auto d = e.kind == Expr::Kind::kName ? std::find(dims.begin(), dims.end(), e.name) : dims.end();
    if (d == dims.end())
      throw Unsupported("ktir: an indexing map whose results are not dims (a permutation or a broadcast)");
    out.push_back(static_cast<int>(d - dims.begin()));
  }
  return out;
}

bool Map::identity() const {
  const std::vector<int> p = projection();
  if (p.size() != dims.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != static_cast<int>(i)) return false;
  }
  return true;
}

bool contains(const Set& s, const std::vector<int64_t>& dims, const std::vector<int64_t>& syms) {
  const Lookup lookup = [&](const std::string& n) -> int64_t {
    for (size_t i = 0; i < s.dims.size() && i < dims.size(); ++i) {
      if (s.dims[i] == n) return dims[i];
    }
    for (size_t i = 0; i < s.syms.size() && i < syms.size(); ++i) {
      if (s.syms[i] == n) return syms[i];
    }
    throw Malformed(fmt::format("ktir: unknown name '{}' in an affine set", n));
  };
  return std::all_of(s.constraints.begin(), s.constraints.end(), [&](const auto& c) {
    const int64_t v = eval(c.first, lookup);
    return c.second ? v == 0 : v >= 0;
  });
}

std::vector<std::pair<int64_t, int64_t>> box(const Set& s, const std::vector<int64_t>& syms, const std::string& what) {
  constexpr int64_t kNone = INT64_MIN;
  std::vector<std::pair<int64_t, int64_t>> out(s.dims.size(), {kNone, kNone});
  for (const auto& [e, eq] : s.constraints) {
    const Linear l = linear(e, s, syms, what);
    int dim = -1;
    for (size_t i = 0; i < l.coef.size(); ++i) {
      if (l.coef[i] == 0) continue;
      if (dim >= 0)
        throw Unsupported(fmt::format("ktir: {}: a set that is not a box (a bound couples two dims)", what));
      dim = static_cast<int>(i);
    }
    if (dim < 0) {
      if (eq ? l.constant != 0 : l.constant < 0) throw Unsupported(fmt::format("ktir: {}: an empty set", what));
      continue;
    }
    const int64_t a = l.coef[dim], c = l.constant;  // a * d + c >= 0 (or == 0)
    auto& [lo, hi] = out[dim];
    if (eq || a > 0) {
      const int64_t b = wrap_sub(0, floor_div(c, a, 0));  // ceil(-c / a)
      lo = lo == kNone ? b : std::max(lo, b);
    }
    if (eq || a < 0) {
      const int64_t b = eq ? wrap_sub(0, floor_div(c, a, 0)) : floor_div(c, wrap_sub(0, a), 0);
      hi = hi == kNone ? b : std::min(hi, b);
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].first == kNone || out[i].second == kNone || out[i].second < out[i].first) {
      throw Unsupported(fmt::format("ktir: {}: dim {} of the set has no finite range", what, s.dims[i]));
    }
  }
  return out;
}

}  // namespace spyre::compiler::ktir
