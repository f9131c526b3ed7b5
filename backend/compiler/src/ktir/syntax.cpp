// The KTIR reader: tokens, then statements. MLIR's grammar is not line based, but its printed
// form (and every hand-written kernel) starts each operation on a line of its own, and a
// continuation line never starts with a result list or a dotted op name: that is how one
// statement is told from the next without knowing each op's custom syntax.
#include "syntax.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "spyre/compiler/errors.h"

namespace spyre::compiler::ktir {
namespace {

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$';
}

// The end of the `<...>` that starts at text[at], skipping the `->`, `>=` and `<=` of affine text.
size_t balanced(std::string_view text, size_t at, int line) {
  int depth = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if ((c == '-' && next == '>') || (c == '>' && next == '=') || (c == '<' && next == '=')) {
      ++i;
    } else if (c == '<') {
      ++depth;
    } else if (c == '>' && --depth == 0) {
      return i + 1;
    }
  }
  throw Malformed(fmt::format("ktir: line {}: unbalanced '<' in a type or attribute", line));
}

bool bracketed_word(std::string_view w, Token::Kind* kind) {
  static constexpr std::string_view kTypes[] = {"tensor", "memref", "vector", "complex"};
  static constexpr std::string_view kAttrs[] = {"affine_set", "affine_map", "dense", "array", "strided"};
  for (std::string_view t : kTypes) {
    if (w == t) return *kind = Token::Kind::kType, true;
  }
  for (std::string_view a : kAttrs) {
    if (w == a) return *kind = Token::Kind::kAttr, true;
  }
  return false;
}

class Reader {
 public:
  explicit Reader(std::vector<Token> t) : t_(std::move(t)) {}

  Module module() {
    Module m;
    while (i_ < t_.size()) {
      if (at().kind == Token::Kind::kAlias && peek(1).is("=")) {
        m.aliases[at().text] = peek(2);
        i_ += 3;
        continue;
      }
      m.ops.push_back(op());
    }
    return m;
  }

 private:
  const Token& at() const { return peek(0); }
  const Token& peek(size_t k) const {
    static const Token kEnd{Token::Kind::kPunct, "<end>", 0, false};
    return i_ + k < t_.size() ? t_[i_ + k] : kEnd;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Malformed(fmt::format("ktir: line {}: {}",
                                i_ < t_.size() ? at().line
                                : t_.empty()   ? 0
                                               : t_.back().line,
                                what));
  }

  // `%a, %b:2 =` starting at token k.
  bool result_list(size_t k) const {
    while (k < t_.size() && t_[k].kind == Token::Kind::kValue) {
      ++k;
      if (k + 1 < t_.size() && t_[k].is(":") && t_[k + 1].kind == Token::Kind::kNumber) k += 2;
      if (k < t_.size() && t_[k].is("=")) return true;
      if (k >= t_.size() || !t_[k].is(",")) return false;
      ++k;
    }
    return false;
  }
  bool starts_statement(size_t k) const {
    const Token& t = t_[k];
    if (!t.line_start) return false;
    if (t.kind == Token::Kind::kValue) return result_list(k);
    return t.kind == Token::Kind::kIdent && (t.text.find('.') != std::string::npos || t.text == "return");
  }
  // A '{' that opens an attribute dictionary rather than a region.
  bool dictionary(size_t k) const {
    if (k + 1 >= t_.size()) return false;
    const Token& n = t_[k + 1];
    if (n.is("}")) return true;
    return (n.kind == Token::Kind::kIdent || n.kind == Token::Kind::kString) && k + 2 < t_.size() && t_[k + 2].is("=");
  }

  Op op() {
    Op o;
    o.line = at().line;
    if (at().kind == Token::Kind::kValue) {
      while (at().kind == Token::Kind::kValue) {
        const std::string name = at().text;
        ++i_;
        if (at().is(":") && peek(1).kind == Token::Kind::kNumber) {
          const int64_t n = to_int(peek(1).text, peek(1).line);
          if (n < 1 || n > 64) fail(fmt::format("a result group of {} values", n));
          for (int r = 0; r < n; ++r) o.results.push_back(fmt::format("{}#{}", name, r));
          i_ += 2;
        } else {
          o.results.push_back(name);
        }
        if (at().is(",")) ++i_;
      }
      if (!at().is("=")) fail("expected '=' after the results");
      ++i_;
    }
    if (at().kind != Token::Kind::kIdent) fail(fmt::format("expected an operation, found '{}'", at().text));
    o.name = at().text;
    ++i_;
    int depth = 0;
    while (i_ < t_.size()) {
      const Token& t = at();
      if (depth == 0 && (t.is("}") || starts_statement(i_))) break;
      if (t.is("{") && depth == 0 && !dictionary(i_)) {
        o.regions.push_back(region());
        o.tokens.push_back(Token{Token::Kind::kPunct, "@region", t.line, false});
        continue;
      }
      if (t.is("(") || t.is("[") || t.is("{")) ++depth;
      if (t.is(")") || t.is("]") || t.is("}")) --depth;
      o.tokens.push_back(t);
      ++i_;
    }
    return o;
  }

  Region region() {
    if (++depth_ > 64) fail("regions nested more than 64 deep");
    Region r;
    ++i_;  // '{'
    r.blocks.emplace_back();
    while (true) {
      if (i_ >= t_.size()) fail("a region is not closed");
      if (at().is("}")) {
        ++i_;
        --depth_;
        break;
      }
      if (at().kind == Token::Kind::kBlock) {
        if (!r.blocks.back().ops.empty() || !r.blocks.back().args.empty()) r.blocks.emplace_back();
        ++i_;
        if (at().is("(")) {
          ++i_;
          while (!at().is(")")) {
            if (i_ >= t_.size() || at().kind != Token::Kind::kValue || !peek(1).is(":")) {
              fail("expected '%arg: type' in a block label");
            }
            r.blocks.back().args.emplace_back(at().text, peek(2).text);
            i_ += 3;
            if (at().is(",")) ++i_;
          }
          ++i_;
        }
        if (!at().is(":")) fail("expected ':' after a block label");
        ++i_;
        continue;
      }
      r.blocks.back().ops.push_back(op());
    }
    return r;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::vector<Token> tokenize(std::string_view s) {
  std::vector<Token> out;
  int line = 1;
  bool line_start = true;
  size_t i = 0;
  const auto push = [&](Token::Kind kind, size_t from, size_t to) {
    out.push_back(Token{kind, std::string(s.substr(from, to - from)), line, line_start});
    line_start = false;
    i = to;
  };
  const auto word_end = [&](size_t from) {
    while (from < s.size() && ident_char(s[from])) ++from;
    return from;
  };
  while (i < s.size()) {
    const char c = s[i];
    const char next = i + 1 < s.size() ? s[i + 1] : '\0';
    if (c == '\n') {
      ++line;
      line_start = true;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '/' && next == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '%' && ident_char(next)) {
      size_t e = word_end(i + 1);
      if (e < s.size() && s[e] == '#') e = word_end(e + 1);
      push(Token::Kind::kValue, i, e);
    } else if ((c == '#' || c == '!') && ident_start(next)) {
      const size_t e = word_end(i + 1);
      if (e < s.size() && s[e] == '<') {
        push(c == '#' ? Token::Kind::kAttr : Token::Kind::kType, i, balanced(s, e, line));
      } else {
        push(c == '#' ? Token::Kind::kAlias : Token::Kind::kType, i, e);
      }
    } else if ((c == '@' || c == '^') && (ident_char(next) || next == '"')) {
      push(c == '@' ? Token::Kind::kSymbol : Token::Kind::kBlock, i, word_end(i + 1));
    } else if (ident_start(c)) {
      const size_t e = word_end(i);
      Token::Kind kind{};
      if (e < s.size() && s[e] == '<' && bracketed_word(s.substr(i, e - i), &kind)) {
        push(kind, i, balanced(s, e, line));
      } else {
        push(Token::Kind::kIdent, i, e);
      }
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = i + 1;
      if (c == '0' && (next == 'x' || next == 'X')) {
        e = i + 2;
        while (e < s.size() && std::isxdigit(static_cast<unsigned char>(s[e]))) ++e;
      } else {
        while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
        if (e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
          ++e;
          while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
        }
        if (e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
          size_t x = e + 1;
          if (x < s.size() && (s[x] == '+' || s[x] == '-')) ++x;
          if (x < s.size() && std::isdigit(static_cast<unsigned char>(s[x]))) {
            e = x;
            while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
          }
        }
      }
      push(Token::Kind::kNumber, i, e);
    } else if (c == '"') {  // MLIR's escapes: \n \t \" \\ and two hex digits
      std::string text;
      size_t e = i + 1;
      for (; e < s.size() && s[e] != '"'; ++e) {
        if (s[e] != '\\' || e + 1 >= s.size()) {
          text += s[e];
          continue;
        }
        const char x = s[++e];
        if (x == 'n') {
          text += '\n';
        } else if (x == 't') {
          text += '\t';
        } else if (std::isxdigit(static_cast<unsigned char>(x)) && e + 1 < s.size() &&
                   std::isxdigit(static_cast<unsigned char>(s[e + 1]))) {
          text += static_cast<char>(std::stoi(std::string(s.substr(e, 2)), nullptr, 16));
          ++e;
        } else {
          text += x;  // \" and \\ and anything else: the character itself
        }
      }
      if (e >= s.size()) throw Malformed(fmt::format("ktir: line {}: unterminated string", line));
      out.push_back(Token{Token::Kind::kString, std::move(text), line, line_start});
      line_start = false;
      i = e + 1;
    } else if ((c == '-' && next == '>') || (c == '>' && next == '=') || (c == '<' && next == '=') ||
               (c == '=' && next == '=')) {
      push(Token::Kind::kPunct, i, i + 2);
    } else if (std::string_view("()[]{},:=+-*/%<>?|").find(c) != std::string_view::npos) {
      push(Token::Kind::kPunct, i, i + 1);
    } else {
      throw Malformed(fmt::format("ktir: line {}: unexpected character '{}'", line, c));
    }
  }
  return out;
}

const Token& Op::tok(size_t i) const {
  static const Token kNone{Token::Kind::kPunct, "", 0, false};
  return i < tokens.size() ? tokens[i] : kNone;
}

const std::string& Op::result() const {
  if (results.empty()) throw Malformed(fmt::format("ktir: line {}: {} names no result", line, name));
  return results[0];
}

int64_t to_int(const std::string& text, int line) {
  errno = 0;
  char* end = nullptr;
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const long long v =
      hex ? static_cast<long long>(std::strtoull(text.c_str(), &end, 16)) : std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
    throw Malformed(fmt::format("ktir: line {}: '{}' is not an integer (or is out of range)", line, text));
  }
  return v;
}

double to_double(const std::string& text, int line) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0') {
    throw Malformed(fmt::format("ktir: line {}: '{}' is not a number", line, text));
  }
  return v;
}

Module parse(std::string_view text) {
  return Reader(tokenize(text)).module();
}

}  // namespace spyre::compiler::ktir
