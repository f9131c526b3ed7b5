// KTIR's text, read into a tree of operations: the MLIR subset that KTIR kernels are written in
// (the custom forms of the ktdp, arith, math, linalg, tensor, scf and func ops), without MLIR.
// The reader knows the shape of MLIR (results, an op name, operands and attributes, regions of
// blocks); what each op's tokens mean is the lowering's business (lower.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace spyre::compiler::ktir {

/// One token. Shaped types (`tensor<4x8xf16>`, `memref<...>`, `!ktdp.access_tile<...>`) and
/// bracketed attributes (`affine_set<...>`, `affine_map<...>`, `dense<...>`, `#ktdp.memory_space<...>`)
/// are single tokens holding their whole text, so the rest of the reader never balances `<>`.
struct Token {
  enum class Kind : uint8_t {
    kValue,   // %name or %name#1
    kAlias,   // #name (an attribute alias)
    kSymbol,  // @name
    kBlock,   // ^bb0
    kIdent,   // a keyword, an op name, a scalar type (f32, index)
    kNumber,  // 12, 1.5, -2.0e-3, 0x7F800000 (without its sign: '-' is punctuation)
    kString,  // "text" (without the quotes)
    kType,    // a shaped type or ! type, whole
    kAttr,    // a bracketed attribute, whole
    kPunct,   // ( ) [ ] { } , : = + - * / % < > -> >= <= ==
  } kind = Kind::kPunct;
  std::string text;
  int line = 0;
  bool line_start = false;  // the first token of its line

  bool is(std::string_view punct_or_word) const {
    return (kind == Kind::kPunct || kind == Kind::kIdent) && text == punct_or_word;
  }
};

/// Splits `text` into tokens; `//` comments are dropped. Throws Malformed naming the line of a
/// character no token starts with, or of an unbalanced `<...>`.
std::vector<Token> tokenize(std::string_view text);

struct Op;
struct Block {
  std::vector<std::pair<std::string, std::string>> args;  // (%name, type text)
  std::vector<Op> ops;
};
struct Region {
  std::vector<Block> blocks;
};

/// One operation: `%r, %s:2 = name <tokens> { region } <tokens> ...`. `tokens` are the op's own
/// tokens in order (attribute dictionaries included); each region is replaced there by a punct
/// token "@region" so that an op can tell what came before and after it.
struct Op {
  std::vector<std::string> results;  // %r, and %s#0, %s#1 for a result group %s:2
  std::string name;
  std::vector<Token> tokens;
  std::vector<Region> regions;
  int line = 0;

  /// Token i, or an empty punct token past the end (so that a short op reads as malformed, not
  /// out of bounds).
  const Token& tok(size_t i) const;
  /// The last token (usually the result type), or an empty one.
  const Token& last() const { return tokens.empty() ? tok(0) : tokens.back(); }
  /// The first result's name; throws Malformed when the op names none.
  const std::string& result() const;
};

/// The integer a number token spells (decimal or 0x hex), or Malformed naming `line`.
int64_t to_int(const std::string& text, int line);
/// The floating-point value a number spells, or Malformed naming `line`.
double to_double(const std::string& text, int line);

struct Module {
  std::map<std::string, Token> aliases;  // #name = <attribute>, from the top of the file
  std::vector<Op> ops;                   // the module's (usually one `module` op or bare funcs)
};

/// Reads a file of KTIR. Throws Malformed naming the line where the text stops making sense.
Module parse(std::string_view text);

}  // namespace spyre::compiler::ktir
