// linalg.generic: an elementwise body over a loop space, each input read through an indexing map.
// The space runs as rows x cols (its last dim the columns); an input whose map keeps every dim is
// a full block, one that drops the last dim a column repeated across the block (a row's mean),
// one that keeps only the last a row repeated down it, one that keeps none a scalar: exactly the
// SFP's broadcast modes, so each body op is one SFP instruction over the whole block. A last
// iterator of type "reduction" whose body ends in `combine(expr, %out)` reduces expr along each
// row into the output (REDUCE, accumulating).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::ktir {
namespace {

using hw::Bcast;
using hw::BinaryFn;
using hw::DType;

// A value of the body: a block in the scratchpad covering the space in some broadcast mode, or a
// scalar known now.
struct BV {
  bool scalar = false;
  double x = 0;
  uint32_t addr = 0;
  Bcast mode = Bcast::kFull;
  DType type = DType::kF32;
};

// The entries of `key = [ ... ]` anywhere in the op's tokens (aliases resolved).
std::vector<Token> list_attribute(const Op& o, const std::string& key, const Module& m) {
  std::vector<Token> out;
  for (size_t i = 0; i + 2 < o.tokens.size(); ++i) {
    if (o.tokens[i].kind != Token::Kind::kIdent || o.tokens[i].text != key || !o.tokens[i + 1].is("=") ||
        !o.tokens[i + 2].is("[")) {
      continue;
    }
    for (size_t j = i + 3; j < o.tokens.size() && !o.tokens[j].is("]"); ++j) {
      const Token& t = o.tokens[j];
      if (t.is(",")) continue;
      if (t.kind == Token::Kind::kAlias) {
        const auto a = m.aliases.find(t.text);
        if (a == m.aliases.end()) throw Malformed(fmt::format("ktir: line {}: unknown attribute {}", t.line, t.text));
        out.push_back(a->second);
      } else {
        out.push_back(t);
      }
    }
    break;
  }
  return out;
}

bool commutative(BinaryFn f) {
  return f == BinaryFn::kAdd || f == BinaryFn::kMul || f == BinaryFn::kMax || f == BinaryFn::kMin;
}

uint64_t elements(Bcast b, uint32_t rows, uint32_t cols) {
  return hw::bcast_elements(b, rows, cols);
}

}  // namespace

void Lowering::generic(const Op& o) {
  const Module& m = *shared_.module;
  const std::vector<Token> maps = list_attribute(o, "indexing_maps", m);
  const std::vector<Token> iters = list_attribute(o, "iterator_types", m);
  const std::vector<std::string> ins = group(o, "ins"), outs = group(o, "outs");
  if (outs.size() != 1)
    throw Unsupported(fmt::format("ktir: line {}: a linalg.generic with {} outputs", o.line, outs.size()));
  if (maps.size() != ins.size() + 1 || iters.empty()) {
    throw Malformed(
        fmt::format("ktir: line {}: linalg.generic needs one indexing map per operand and iterator_types", o.line));
  }
  const size_t n = iters.size();
  const auto reduction = [](const Token& t) { return t.text.find("reduction") != std::string::npos; };
  for (size_t i = 0; i + 1 < n; ++i) {
    if (reduction(iters[i])) {
      throw Unsupported(
          fmt::format("ktir: line {}: a linalg.generic reducing along a dim other than the last", o.line));
    }
  }
  const bool reducing = reduction(iters[n - 1]);
  // The modes of the operands against the space [rows, cols].
  const auto mode_of = [&](const Token& map) -> Bcast {
    const std::vector<int> p = parse_map(map.text, o.line).projection();
    std::vector<int> kept;
    for (int d : p) {
      if (d >= 0) kept.push_back(d);
    }
    std::vector<int> all(n), but_last(n - 1);
    for (size_t i = 0; i < n; ++i) all[i] = static_cast<int>(i);
    std::copy(all.begin(), all.end() - 1, but_last.begin());
    if (kept == all) return Bcast::kFull;
    if (kept.empty()) return Bcast::kScalar;
    if (kept == but_last) return Bcast::kCol;
    if (kept == std::vector<int>{static_cast<int>(n - 1)}) return Bcast::kRow;
    throw Unsupported(fmt::format("ktir: line {}: an indexing map that permutes or skips inner dims", o.line));
  };
  const Bcast out_mode = mode_of(maps.back());
  if (out_mode != (reducing ? Bcast::kCol : Bcast::kFull) && !(n == 1 && reducing && out_mode == Bcast::kScalar)) {
    throw Unsupported(
        fmt::format("ktir: line {}: a linalg.generic whose output map is not the space (or, reducing, "
                    "the space without its last dim)",
                    o.line));
  }
  // The space's shape: a full input's, or the output's.
  const TensorV out = tensor(outs[0], o.line);
  std::vector<int64_t> space = out.shape;
  for (size_t i = 0; i < ins.size(); ++i) {
    const Value& v = value(ins[i], o.line);
    if (std::holds_alternative<TensorV>(v) && mode_of(maps[i]) == Bcast::kFull) space = std::get<TensorV>(v).shape;
  }
  if (space.size() != n)
    throw Malformed(fmt::format("ktir: line {}: the loop space has {} dims, not {}", o.line, space.size(), n));
  int64_t numel = 1;
  for (int64_t s : space) numel *= s;
  const auto cols = static_cast<uint32_t>(std::max<int64_t>(space.back(), 1));
  const auto rows = static_cast<uint32_t>(numel / std::max<int64_t>(space.back(), 1));
  if (o.regions.empty() || o.regions[0].blocks.empty())
    throw Malformed(fmt::format("ktir: line {}: linalg.generic without a body", o.line));
  const Block& body = o.regions[0].blocks[0];
  if (body.args.size() != ins.size() + 1)
    throw Malformed(fmt::format("ktir: line {}: the body takes one argument per operand", o.line));

  std::map<std::string, BV> vals;
  for (size_t i = 0; i < ins.size(); ++i) {
    const Value& v = value(ins[i], o.line);
    BV b;
    if (const auto* t = std::get_if<TensorV>(&v)) {
      b.addr = t->addr;
      b.mode = mode_of(maps[i]);
      b.type = t->dtype;
      if (static_cast<uint64_t>(t->numel()) != elements(b.mode, rows, cols)) {
        throw Malformed(fmt::format("ktir: line {}: input {} does not fit its indexing map", o.line, ins[i]));
      }
      before_read(t->addr, t->bytes());
    } else {
      b.scalar = true;
      b.x = scalar(ins[i], o.line);
    }
    vals[body.args[i].first] = b;
  }
  const std::string out_arg = body.args.back().first;
  bool reads_out = false;
  std::optional<BinaryFn> combine;
  std::string combined, reduced;  // the combining op's result, and what it reduces
  const uint32_t mark = top_;
  const auto temp = [&](DType t) {
    return new_tensor({static_cast<int64_t>(rows), static_cast<int64_t>(cols)}, t, o.line);
  };
  const auto scalar_block = [&](const BV& s, DType t) {
    BV b;
    b.addr = scalar_tensor(s.x, t, o.line).addr;
    b.mode = Bcast::kScalar;
    b.type = t;
    return b;
  };
  TensorV dst = destination(outs[0], out.shape, out.dtype, false, o.line);
  // The value the body yields is written straight into the output when it is a full block of the
  // output's type (no copy after).
  std::string yielded;
  for (const Op& op : body.ops) {
    if (op.name == "linalg.yield") yielded = op.tok(0).text;
  }
  const auto into = [&](const std::string& name, DType t) {
    if (!reducing && name == yielded && t == dst.dtype) return dst.addr;
    return temp(t).addr;
  };
  BV result;
  for (const Op& op : body.ops) {
    line_ = op.line;
    const std::vector<std::string> args = operands(op);
    const auto get = [&](const std::string& name) -> BV {
      if (name == out_arg) {
        reads_out = true;
        BV b;
        b.addr = dst.addr;
        b.mode = reducing ? Bcast::kCol : Bcast::kFull;
        b.type = dst.dtype;
        return b;
      }
      const auto f = vals.find(name);
      if (f != vals.end()) return f->second;
      BV b;  // a scalar from outside the body
      b.scalar = true;
      b.x = scalar(name, op.line);
      return b;
    };
    const std::string type = op.last().text;
    if (op.name == "linalg.yield") {
      if (args.size() != 1) throw Malformed(fmt::format("ktir: line {}: linalg.yield of one value", op.line));
      if (reducing && args[0] != combined) {
        throw Unsupported(fmt::format("ktir: line {}: a reduction body must end in combine(expr, %out)", op.line));
      }
      result = reducing ? get(reduced) : get(args[0]);
      break;
    }
    if (op.name == "arith.constant") {
      BV b;
      b.scalar = true;
      b.x = op.tok(0).is("-") ? -to_double(op.tok(1).text, op.line) : to_double(op.tok(0).text, op.line);
      vals[op.result()] = b;
      continue;
    }
    if (const auto fn = binary_fn(op.name)) {
      if (args.size() != 2) throw Malformed(fmt::format("ktir: line {}: {} takes two operands", op.line, op.name));
      if (reducing && (args[0] == out_arg || args[1] == out_arg)) {
        combine = fn;
        combined = op.result();
        reduced = args[0] == out_arg ? args[1] : args[0];
        continue;
      }
      BV a = get(args[0]), b = get(args[1]);
      const DType t = dtype_of(type, op.line);
      if (a.scalar && b.scalar) {
        BV r;
        r.scalar = true;
        r.x = fold_binary(*fn, a.x, b.x);
        vals[op.result()] = r;
        continue;
      }
      if (a.scalar && commutative(*fn)) std::swap(a, b);
      if (a.scalar) a = scalar_block(a, t);
      uint64_t imm = 0;
      Bcast mb = b.mode;
      if (b.scalar) {
        const float f = static_cast<float>(b.x);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        imm = bits;
        mb = Bcast::kImm;
      }
      if (a.type != t || (!b.scalar && b.type != t)) {
        throw Malformed(fmt::format("ktir: line {}: {} of {} operands", op.line, op.name, type));
      }
      const uint32_t r = into(op.result(), t);
      emit(emit::sfp(hw::Op::kBinary, t, 0, r, emit::pack2(a.addr, b.scalar ? 0 : b.addr),
                     static_cast<uint64_t>(*fn) | imm << 32, rows, cols, hw::bcast_flags(a.mode, mb)));
      shared_.work.sfp_elements += uint64_t{rows} * cols;
      vals[op.result()] = BV{false, 0, r, Bcast::kFull, t};
      continue;
    }
    if (const auto fn = unary_fn(op.name)) {
      if (args.empty()) throw Malformed(fmt::format("ktir: line {}: {} without an operand", op.line, op.name));
      const BV a = get(args[0]);
      if (a.scalar)
        throw Unsupported(fmt::format("ktir: line {}: {} of a constant in a linalg.generic", op.line, op.name));
      const uint32_t r = into(op.result(), a.type);
      emit(emit::sfp(hw::Op::kUnary, a.type, 0, r, a.addr, static_cast<uint64_t>(*fn), rows, cols,
                     static_cast<uint8_t>(a.mode)));
      shared_.work.sfp_elements += uint64_t{rows} * cols;
      vals[op.result()] = BV{false, 0, r, Bcast::kFull, a.type};
      continue;
    }
    if (op.name == "arith.truncf" || op.name == "arith.extf") {
      if (args.empty()) throw Malformed(fmt::format("ktir: line {}: {} without an operand", op.line, op.name));
      const BV a = get(args[0]);
      const DType t = dtype_of(type, op.line);
      if (a.scalar) {
        vals[op.result()] = a;
        continue;
      }
      const uint64_t count = elements(a.mode, rows, cols);
      const TensorV r = new_tensor({static_cast<int64_t>(count)}, t, op.line);
      emit(emit::sfp(hw::Op::kConvert, t, 0, r.addr, a.addr, static_cast<uint64_t>(a.type), 1,
                     static_cast<uint32_t>(count)));
      shared_.work.sfp_elements += count;
      vals[op.result()] = BV{false, 0, r.addr, a.mode, t};
      continue;
    }
    throw Unsupported(fmt::format("ktir: line {}: {} in a linalg.generic body", op.line, op.name));
  }
  line_ = o.line;
  if (reads_out && !reducing) {
    throw Unsupported(fmt::format("ktir: line {}: a parallel linalg.generic that reads its output", o.line));
  }
  before_write(dst.addr, dst.bytes());
  if (reducing) {
    const std::optional<hw::ReduceFn> folded = reduce_fn(combine);
    if (!folded) {
      throw Unsupported(
          fmt::format("ktir: line {}: a reduction that does not add, multiply, or keep a max or min", o.line));
    }
    const hw::ReduceFn rf = *folded;
    if (result.scalar) result = scalar_block(result, dst.dtype);
    if (result.mode != Bcast::kFull || result.type != dst.dtype) {
      const TensorV full = temp(dst.dtype);
      if (result.type != dst.dtype) {
        throw Malformed(fmt::format("ktir: line {}: a reduction of {} into {}", o.line, hw::dtype_name(result.type),
                                    hw::dtype_name(dst.dtype)));
      }
      emit(emit::sfp(hw::Op::kUnary, dst.dtype, 0, full.addr, result.addr, static_cast<uint64_t>(hw::UnaryFn::kCopy),
                     rows, cols, static_cast<uint8_t>(result.mode)));
      result = BV{false, 0, full.addr, Bcast::kFull, dst.dtype};
    }
    // What the output held is combined in, unless it was never written.
    if (out.fresh) {
      emit(emit::sfp(hw::Op::kReduce, dst.dtype, 0, dst.addr, result.addr, static_cast<uint64_t>(rf), rows, cols));
    } else {
      if (dst.addr != out.addr) copy(out, dst);
      emit(emit::sfp(hw::Op::kReduce, dst.dtype, 0, dst.addr, result.addr, static_cast<uint64_t>(rf), rows, cols,
                     hw::kReduceAccumulate));
    }
    shared_.work.sfp_elements += uint64_t{rows} * cols;
  } else if (result.scalar) {
    emit(emit::sfp(hw::Op::kFill, dst.dtype, 0, dst.addr, 0,
                   hw::dtype_is_float(dst.dtype) ? emit::double_bits(result.x) : integer_bits(result.x, o.line), rows,
                   cols));
  } else if (result.addr == dst.addr) {
    // written in place by the body's last op
  } else if (result.type == dst.dtype) {
    emit(emit::sfp(hw::Op::kUnary, dst.dtype, 0, dst.addr, result.addr, static_cast<uint64_t>(hw::UnaryFn::kCopy), rows,
                   cols, static_cast<uint8_t>(result.mode)));
  } else if (result.mode == Bcast::kFull) {
    emit(emit::sfp(hw::Op::kConvert, dst.dtype, 0, dst.addr, result.addr, static_cast<uint64_t>(result.type), rows,
                   cols));
  } else {
    throw Unsupported(fmt::format("ktir: line {}: a broadcast result converted into the output", o.line));
  }
  // The temporaries die here; the output (above the mark, or the first allocation after it) lives on.
  top_ = dst.addr >= mark ? mark : dst.addr;
  TensorV r = dst;
  r.zero = false;
  define(o, {r});
}

}  // namespace spyre::compiler::ktir
