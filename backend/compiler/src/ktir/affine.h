// Affine (and quasi-affine) integer expressions, maps and sets: the subscripts of KTIR's access
// tiles and the `affine_set<...>` / `affine_map<...>` attributes that bound them. Every value in
// them is known when a kernel is lowered (the tile id, loop counters, constants), so they are
// evaluated, not solved.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "syntax.h"

namespace spyre::compiler::ktir {

/// Index arithmetic wraps, as MLIR's `index` type does (and never overflows a signed int here).
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
/// Floor division; throws Malformed naming `line` for a division by zero.
int64_t floor_div(int64_t a, int64_t b, int line);

struct Expr {
  enum class Kind : uint8_t {
    kConst,
    kName,
    kAdd,
    kSub,
    kMul,
    kFloorDiv,
    kCeilDiv,
    kMod,
    kNeg,
    kIndexed
  } kind = Kind::kConst;
  int64_t value = 0;
  std::string name;        // kName: %value, d0, s0; kIndexed: the index view's %name
  std::vector<Expr> args;  // operands; kIndexed: the subscripts into the index view
};

/// Reads an expression from tokens[*at], leaving *at after it (at a ',', ']', ')' or comparison).
/// `name[e, ...]` reads as an indexed (indirect) term. Throws Malformed naming `line`.
Expr parse_expr(const std::vector<Token>& tokens, size_t* at);

using Lookup = std::function<int64_t(const std::string& name)>;
/// The value of `e`, names resolved by `lookup` (floor division and a non-negative modulo, as in
/// MLIR's affine semantics). Indexed terms go to `lookup` as "name[i,j]". Throws Malformed for a
/// division by zero.
int64_t eval(const Expr& e, const Lookup& lookup);

/// A set `affine_set<(d0, ...)[s0, ...] : (c >= 0, c == 0, ...)>`: each constraint is an expression
/// compared with zero.
struct Set {
  std::vector<std::string> dims, syms;
  std::vector<std::pair<Expr, bool>> constraints;  // (e, is_equality): e >= 0 or e == 0
};
/// A map `affine_map<(d0, ...)[s0, ...] -> (e, ...)>`.
struct Map {
  std::vector<std::string> dims, syms;
  std::vector<Expr> results;
  /// The results as a selection of dims ((d0, d1) -> (d1) gives {1}); -1 for a constant-0 result
  /// (a broadcast map's `0`). Throws Unsupported for any other expression.
  std::vector<int> projection() const;
  bool identity() const;
};

/// Parses an attribute's text (`affine_set<...>`, `affine_map<...>`, or the brace form
/// `{(d0, d1) | 0 <= d0 < 2, ...}`). Throws Malformed naming `line`.
Set parse_set(const std::string& text, int line);
Map parse_map(const std::string& text, int line);

/// Whether point `dims` (with symbols `syms`) lies in the set.
bool contains(const Set& s, const std::vector<int64_t>& dims, const std::vector<int64_t>& syms);
/// The set as a box: [first, last] of each dim. Throws Unsupported when a constraint couples two
/// dims (a triangle, a skew) or the set is unbounded, naming `what`.
std::vector<std::pair<int64_t, int64_t>> box(const Set& s, const std::vector<int64_t>& syms, const std::string& what);

}  // namespace spyre::compiler::ktir
