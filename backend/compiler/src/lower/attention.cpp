// Attention family: softmax(scale * Q K^T + mask) V as one kernel whose scores never leave the
// scratchpad (ir::Attention).
//
// q and k have head dim D, v and out Dv. An item is a block of `r` query rows of `gs` query heads that share one key
// head, so that its keys and values are loaded once for all of them: its Q rows are packed into one [gs * r, D] tile.
// The keys are walked in blocks of `kb` (unrolled: the program holds one copy of the block's code
// per key block, each with its own immediates), software-pipelined so that the PT arrays and the SFP
// work at once: block j+1's scores Q Kb^T are issued before block j's softmax, and block j+2's keys,
// values (and bias) are loaded meanwhile. Scores, probabilities and keys take two buffers each, the
// bias three and the values four, so that no load or product waits for one still in flight.
// Per block, with m the running row max, l the running denominator and O the running
// (unnormalized) output, all fp32:
//   S = scale * Q Kb^T (+ bias, or -inf where masked)      m' = max(m, rowmax S)
//   ms = m' where finite, else 0                             alpha = exp(m - ms)
//   P = exp(S - ms)                                          l = l * alpha + rowsum P
//   O = O * alpha + P Vb                                     (P in the operands' type for the product)
// and at the end out = O / l (0 for a row that saw no key: its O and l are 0) and
// lse = ms + log l (-inf for such a row). Under a causal mask, key blocks after an item's last row
// are skipped at run time, and blocks before its first row skip the mask; the cores that share a
// head's row blocks are dealt them round-robin, so that each gets early (short) and late rows.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "layout.h"
#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::lower {
namespace {

using emit::Builder;
using hw::Bcast;
using hw::BinaryFn;
using hw::DType;
using hw::ReduceFn;
using hw::UnaryFn;
using schedule::kBodyReg;
using schedule::kBufferReg;
using schedule::level_reg;
using schedule::operand_reg;

// Buffers of each kind of block operand, and the DMA tags: Q, one per K, V and bias buffer, the stores.
constexpr uint32_t kKBufs = 2, kVBufs = 4, kBiasBufs = 3;
constexpr uint32_t kQTag = 0;
constexpr uint32_t kKTag = 1;                  // + buffer
constexpr uint32_t kVTag = kKTag + kKBufs;     // + buffer
constexpr uint32_t kBiasTag = kVTag + kVBufs;  // + buffer
constexpr uint32_t kStoreTag = kBiasTag + kBiasBufs;
static_assert(kStoreTag < hw::kNumDmaTags);
constexpr uint32_t kScratch = 6;  // the nest's temporary: free inside the body (set before each use)
constexpr uint32_t kRowBase = 7;  // the nest's prologue register: free inside the body (set before each use)
constexpr uint32_t kPrefetchMask =
    ((1u << kKBufs) - 1) << kKTag | ((1u << kVBufs) - 1) << kVTag | ((1u << kBiasBufs) - 1) << kBiasTag;

// Nest operands.
constexpr uint32_t kQ = 0, kOut = 1, kK = 2, kV = 3;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Dims {
  int64_t batch, heads, kv_heads, group, length, keys, dim, vdim;  // dim: of q and k; vdim: of v and out
};

// Rows, keys and heads of one item.
struct Tiles {
  int64_t gs = 1, r = 1, kb = 1;
};

// Scratchpad regions of an item (every item uses the same ones: one item fills the scratchpad).
struct Regions {
  uint32_t q = 0, kbuf[kKBufs] = {}, kt[2] = {}, vbuf[kVBufs] = {}, s[2] = {}, p[2] = {}, o = 0, oc = 0;
  uint32_t m = 0, mb = 0, mn = 0, ms = 0, alpha = 0, l = 0, lb = 0, tmp = 0, ok = 0;
  uint32_t bias[kBiasBufs] = {}, biasf = 0, keep = 0, rowi = 0, coli = 0;
  uint64_t used = 0;
};

struct Kinds {
  DType type, out, bias;
  bool has_bias, bias_per_head, causal;
};

Regions plan(const Dims& d, const Tiles& t, const Kinds& k) {
  LxPlan x;
  Regions g;
  const uint64_t es = hw::dtype_size(k.type), eo = hw::dtype_size(k.out);
  const auto rr = static_cast<uint64_t>(t.gs * t.r), kb = static_cast<uint64_t>(t.kb),
             dim = static_cast<uint64_t>(d.dim), vdim = static_cast<uint64_t>(d.vdim), r = static_cast<uint64_t>(t.r);
  g.q = x.take(rr * dim * es);
  for (uint32_t& k_buf : g.kbuf) k_buf = x.take(kb * dim * es);
  for (uint32_t i = 0; i < 2; ++i) g.kt[i] = x.take(dim * kb * es);
  for (uint32_t& v_buf : g.vbuf) v_buf = x.take(kb * vdim * es);
  for (uint32_t i = 0; i < 2; ++i) g.s[i] = x.take(rr * kb * 4);
  for (uint32_t i = 0; i < 2; ++i) g.p[i] = es == 4 ? g.s[i] : x.take(rr * kb * es);
  g.o = x.take(rr * vdim * 4);
  g.oc = eo == 4 ? g.o : x.take(rr * vdim * eo);
  for (uint32_t* row : {&g.m, &g.mb, &g.mn, &g.ms, &g.alpha, &g.l, &g.lb, &g.tmp}) *row = x.take(rr * 4);
  g.ok = x.take(rr);
  if (k.has_bias) {
    const uint64_t heads = k.bias_per_head ? static_cast<uint64_t>(t.gs) : 1;
    for (uint32_t& b_buf : g.bias) b_buf = x.take(heads * r * kb * hw::dtype_size(k.bias));
    if (k.bias != DType::kBool && k.bias != DType::kF32) g.biasf = x.take(r * kb * 4);
  }
  if (k.causal) {
    g.keep = x.take(r * kb);
    g.rowi = x.take(r * 4);
    g.coli = x.take(kb * 4);
  }
  g.used = x.used();
  return g;
}

// How many cores share one unit of work (a batch's key head's group of `gs` heads) when `cores`
// take the units: ceil(cores / units), at least 1.
int64_t cores_per_unit(const Dims& d, int64_t gs, uint32_t cores) {
  const int64_t units = d.batch * d.kv_heads * (d.group / gs);
  return std::max<int64_t>(1, (static_cast<int64_t>(cores) + units - 1) / units);
}

// The largest tiles whose item fits the scratchpad: up to 512 packed rows (as many heads of a key
// head as divide its group), key blocks of up to 128; rows split further while there are fewer
// items than cores. Every row of an item reuses each key and value loaded: at 512 rows the
// card's memory feeds the products (Llama-3-8B's causal prefill attention was bound by its
// loads at 256).
Tiles choose(const Dims& d, const Kinds& k, uint64_t lx_bytes, uint32_t cores) {
  for (int64_t kb = std::min<int64_t>(d.keys, 128);; kb = std::max<int64_t>(1, kb / 2)) {
    for (int64_t gs = d.group; gs >= 1; --gs) {
      if (d.group % gs != 0) continue;
      const int64_t blocks_wanted = cores_per_unit(d, gs, cores);
      const int64_t spread = (d.length + blocks_wanted - 1) / blocks_wanted;
      for (int64_t r = std::min({d.length, std::max<int64_t>(1, 512 / gs), spread});; r = (r + 1) / 2) {
        const Tiles t{gs, r, kb};
        if (plan(d, t, k).used <= lx_bytes) return t;
        if (r == 1) break;
      }
    }
    if (kb == 1) break;
  }
  throw Unsupported(
      fmt::format("compiler: attention with head dim {} does not fit a {} byte scratchpad", d.dim, lx_bytes));
}

void sfp(Builder& b, hw::Op op, DType t, uint32_t dst, uint64_t x, uint64_t y, int64_t rows, int64_t cols,
         uint8_t flags = 0) {
  b.emit(emit::sfp(op, t, kBufferReg, dst, x, y, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), flags));
}

// dst = f(x, y) in fp32 with broadcasts; `imm` for an immediate operand (kImm).
void binary(Builder& b, BinaryFn f, uint32_t dst, uint32_t x, Bcast bx, uint32_t y, Bcast by, int64_t rows,
            int64_t cols, double imm = 0) {
  const uint64_t bits = (bx == Bcast::kImm || by == Bcast::kImm) ? f32_bits(imm) : 0;
  sfp(b, hw::Op::kBinary, DType::kF32, dst, emit::pack2(x, y), static_cast<uint64_t>(f) | bits << 32, rows, cols,
      hw::bcast_flags(bx, by));
}

void unary(Builder& b, UnaryFn f, uint32_t dst, uint32_t x, int64_t rows, int64_t cols) {
  sfp(b, hw::Op::kUnary, DType::kF32, dst, x, static_cast<uint64_t>(f), rows, cols);
}

// dst = mask ? x : imm (x a full fp32 block, mask a full bool block).
void keep_or(Builder& b, uint32_t dst, uint32_t mask, uint32_t x, double imm, int64_t rows, int64_t cols) {
  sfp(b, hw::Op::kSelect, DType::kF32, dst, emit::pack2(mask, x), uint64_t{f32_bits(imm)} << 32, rows, cols,
      hw::bcast_flags(Bcast::kFull, Bcast::kImm));
}

void matmul(Builder& b, DType t, uint32_t c, uint32_t a, uint32_t bm, int64_t m, int64_t k, int64_t n, bool acc) {
  hw::Instr in = emit::instr(hw::Op::kMatmul);
  in.dtype = t;
  in.regs = hw::pack_regs(0, kBufferReg);
  in.flags = acc ? hw::kMatmulAccumulate : 0;
  in.a = c;
  in.b = emit::pack2(a, bm);
  in.c = hw::pack_mkn(static_cast<uint64_t>(m), static_cast<uint64_t>(k), static_cast<uint64_t>(n));
  b.emit(in);
}

}  // namespace

std::optional<Kernel> lower_attention(const ir::Graph& g, const ir::Attention& a, const Target& t) {
  const ir::View &q = g.views.at(a.q), &k = g.views.at(a.k), &v = g.views.at(a.v), &out = g.views.at(a.out);
  for (const ir::View* x : {&q, &k, &v, &out}) {
    if (x->sizes.size() != 4 || x->strides[3] != 1) {
      throw Malformed("compiler: attention takes 4-d query, key, value and output with a contiguous last dim");
    }
  }
  const Dims d{q.sizes[0], q.sizes[1], k.sizes[1], k.sizes[1] > 0 ? q.sizes[1] / k.sizes[1] : 0,
               q.sizes[2], k.sizes[2], q.sizes[3], v.sizes[3]};
  if (k.sizes[0] != d.batch || v.sizes[0] != d.batch || v.sizes[1] != d.kv_heads || v.sizes[2] != d.keys ||
      k.sizes[3] != d.dim || d.kv_heads == 0 || d.heads % d.kv_heads != 0 ||
      out.sizes != std::vector<int64_t>{d.batch, d.heads, d.length, d.vdim} || k.dtype != q.dtype ||
      v.dtype != q.dtype || !hw::dtype_is_float(q.dtype) || !hw::dtype_is_float(out.dtype)) {
    throw Malformed("compiler: attention's query, key, value and output do not agree in shape or type");
  }
  if (a.causal && a.bias >= 0) throw Malformed("compiler: attention with both a bias and a causal mask");
  if (out.numel() == 0) return std::nullopt;
  if (d.keys == 0) throw Unsupported("compiler: attention over no keys is a fill");
  const ir::View* bias = a.bias >= 0 ? &g.views.at(static_cast<size_t>(a.bias)) : nullptr;
  if (bias && (bias->sizes != std::vector<int64_t>{d.batch, d.heads, d.length, d.keys} || bias->strides[3] != 1 ||
               !(bias->dtype == DType::kBool || hw::dtype_is_float(bias->dtype)))) {
    throw Malformed("compiler: attention's bias must be [B, H, L, S] (broadcast), bool or float, keys contiguous");
  }
  const ir::View* lse = a.lse >= 0 ? &g.views.at(static_cast<size_t>(a.lse)) : nullptr;
  if (lse && (lse->sizes != std::vector<int64_t>{d.batch, d.heads, d.length} || lse->dtype != DType::kF32)) {
    throw Malformed("compiler: attention's logsumexp must be fp32 [B, H, L]");
  }
  const Kinds kinds{
      q.dtype, out.dtype, bias ? bias->dtype : DType::kBool, bias != nullptr, bias && bias->strides[1] != 0, a.causal};
  const Tiles tl = choose(d, kinds, t.lx_bytes, t.cores);
  const Regions lx = plan(d, tl, kinds);
  const uint64_t es = hw::dtype_size(q.dtype), eo = hw::dtype_size(out.dtype);
  const uint64_t eb = bias ? hw::dtype_size(bias->dtype) : 0;

  // The nest: batch, key head, group of gs heads, row block (levels of one iteration dropped).
  Kernel kn;
  kn.nest.operands = {{q.arg, q.offset * static_cast<int64_t>(es)},
                      {out.arg, out.offset * static_cast<int64_t>(eo)},
                      {k.arg, k.offset * static_cast<int64_t>(es)},
                      {v.arg, v.offset * static_cast<int64_t>(es)}};
  const int64_t row_blocks = (d.length + tl.r - 1) / tl.r;
  const int64_t tail_rows = d.length - (row_blocks - 1) * tl.r;
  const auto ses = static_cast<int64_t>(es), seo = static_cast<int64_t>(eo);
  struct Dim {
    int64_t count, q, out, k, v;
    int32_t* level;
  };
  int32_t lv_b = -1, lv_kvh = -1, lv_sub = -1, lv_rb = -1, lv_cycle = -1;
  // Under a causal mask a row block's work grows with its rows, and the nest gives each core a run
  // of consecutive items: the cores sharing a head's row blocks would get its first rows (little
  // work) or its last (most). When they divide evenly, `phases` cores deal them to and fro instead:
  // at step c, core `phase` takes row block phases * c + phase when c is even and
  // phases * c + phases - 1 - phase when it is odd, so that over two steps every core has the same
  // rows to attend to. The body finds its rows' addresses (the nest does not walk them).
  const int64_t phases = cores_per_unit(d, tl.gs, t.cores);
  const bool dealt = a.causal && tail_rows == tl.r && phases > 1 && row_blocks % phases == 0 && row_blocks > phases;
  const int64_t rb_count = dealt ? phases : row_blocks;
  const Dim dims[] = {
      {d.batch, q.strides[0] * ses, out.strides[0] * seo, k.strides[0] * ses, v.strides[0] * ses, &lv_b},
      {d.kv_heads, d.group * q.strides[1] * ses, d.group * out.strides[1] * seo, k.strides[1] * ses, v.strides[1] * ses,
       &lv_kvh},
      {d.group / tl.gs, tl.gs * q.strides[1] * ses, tl.gs * out.strides[1] * seo, 0, 0, &lv_sub},
      {rb_count, dealt ? 0 : tl.r * q.strides[2] * ses, dealt ? 0 : tl.r * out.strides[2] * seo, 0, 0, &lv_rb},
      {dealt ? row_blocks / phases : 1, 0, 0, 0, 0, &lv_cycle},
  };
  for (const Dim& x : dims) {
    if (x.count == 1) continue;
    *x.level = static_cast<int32_t>(kn.nest.levels.size());
    kn.nest.levels.push_back({static_cast<uint64_t>(x.count), {x.q, x.out, x.k, x.v}});
  }
  if (tail_rows != tl.r) kn.nest.tail_levels.push_back(static_cast<uint32_t>(lv_rb));
  kn.nest.half_bytes = 0;  // one plan for every item (see the store wait below)

  const int64_t blocks = (d.keys + tl.kb - 1) / tl.kb;
  const DType type = q.dtype, out_type = out.dtype;
  const int64_t s_qh = q.strides[1] * ses, s_ql = q.strides[2] * ses, s_oh = out.strides[1] * seo,
                s_ol = out.strides[2] * seo, s_kl = k.strides[2] * ses, s_vl = v.strides[2] * ses;
  const ir::View bias_view = bias ? *bias : ir::View{};
  const ir::View lse_view = lse ? *lse : ir::View{};
  const int64_t gs = tl.gs, r = tl.r, kb = tl.kb, dim = d.dim, vdim = d.vdim, group = d.group;
  const double scale = a.scale;

  // r[reg] = this item's row block (r[kBodyReg] is clobbered).
  const auto row_block = [=](Builder& b, uint32_t reg) {
    if (lv_rb < 0) {
      b.emit(emit::li(reg, 0));
      return;
    }
    const uint32_t phase = level_reg(static_cast<uint32_t>(lv_rb));
    if (!dealt) {
      b.emit(emit::addi(reg, phase, 0));
      return;
    }
    const uint32_t step = level_reg(static_cast<uint32_t>(lv_cycle));
    const Builder::Label even = b.label(), done = b.label();
    b.emit(emit::remu(reg, step, 2));
    b.branch(hw::Cond::kEq, reg, 0, even);
    b.emit(emit::muli(reg, phase, -1));
    b.emit(emit::addi(reg, reg, phases - 1));
    b.jump(done);
    b.bind(even);
    b.emit(emit::addi(reg, phase, 0));
    b.bind(done);
    b.emit(emit::muli(kBodyReg, step, phases));
    b.emit(emit::add(reg, reg, kBodyReg));
  };
  // r[kRowBase] = the device address of this item's first row of `view` (whose row stride is
  // `row_bytes`) when the nest does not walk its rows: r[base] plus the row block's offset.
  // Otherwise the nest's own register `base`. Returns the register.
  const auto rows_at = [=](Builder& b, uint32_t base, int64_t row_bytes) -> uint32_t {
    if (!dealt) return base;
    row_block(b, kRowBase);
    b.emit(emit::muli(kRowBase, kRowBase, r * row_bytes));
    b.emit(emit::add(kRowBase, kRowBase, base));
    return kRowBase;
  };
  // r[reg] = the device address of `view`'s element [b, h0, i0, 0] for this item, where h0 is its
  // first head and i0 its first row (the nest does not walk these operands).
  const auto item_address = [=](Builder& b, uint32_t reg, const ir::View& view, uint64_t esize) {
    const auto se = static_cast<int64_t>(esize);
    b.emit(emit::arg(reg, view.arg));
    if (view.offset != 0) b.emit(emit::addi(reg, reg, view.offset * se));
    const std::pair<int32_t, int64_t> steps[] = {{lv_b, view.strides[0] * se},
                                                 {lv_kvh, group * view.strides[1] * se},
                                                 {lv_sub, gs * view.strides[1] * se},
                                                 {lv_rb, dealt ? 0 : r * view.strides[2] * se}};
    for (const auto& [level, step] : steps) {
      if (level < 0 || step == 0) continue;
      b.emit(emit::muli(kBodyReg, level_reg(static_cast<uint32_t>(level)), step));
      b.emit(emit::add(reg, reg, kBodyReg));
    }
    if (dealt) b.emit(emit::addi(reg, rows_at(b, reg, view.strides[2] * se), 0));
  };
  // r[kScratch] = this item's first row i0.
  const auto first_row = [=](Builder& b) {
    row_block(b, kScratch);
    b.emit(emit::muli(kScratch, kScratch, r));
  };

  kn.body = [=](Builder& b, uint32_t tails) {
    const int64_t rows = tails != 0 ? tail_rows : r;
    const int64_t rr = gs * rows;
    const Builder::Label epilogue = b.label();
    const uint32_t q_at = rows_at(b, operand_reg(kQ), s_ql);
    for (int64_t j = 0; j < gs; ++j) {
      b.emit(emit::dma(hw::Op::kLoad, type, q_at, kBufferReg, lx.q + static_cast<uint32_t>(j * rows * dim * ses),
                       static_cast<uint64_t>(j * s_qh), static_cast<uint64_t>(s_ql), static_cast<uint32_t>(rows),
                       static_cast<uint32_t>(dim * ses), true, kQTag));
    }
    if (kinds.has_bias) item_address(b, kScratch, bias_view, eb);
    const int64_t bias_heads = kinds.bias_per_head ? gs : 1;
    const auto load_block = [&](int64_t jb) {
      const int64_t j0 = jb * kb, n = std::min(kb, d.keys - j0);
      const auto kbuf = static_cast<uint32_t>(jb % kKBufs), vbuf = static_cast<uint32_t>(jb % kVBufs),
                 bbuf = static_cast<uint32_t>(jb % kBiasBufs);
      b.emit(emit::dma(hw::Op::kLoad, type, operand_reg(kK), kBufferReg, lx.kbuf[kbuf],
                       static_cast<uint64_t>(j0 * s_kl), static_cast<uint64_t>(s_kl), static_cast<uint32_t>(n),
                       static_cast<uint32_t>(dim * ses), true, kKTag + kbuf));
      b.emit(emit::dma(hw::Op::kLoad, type, operand_reg(kV), kBufferReg, lx.vbuf[vbuf],
                       static_cast<uint64_t>(j0 * s_vl), static_cast<uint64_t>(s_vl), static_cast<uint32_t>(n),
                       static_cast<uint32_t>(vdim * ses), true, kVTag + vbuf));
      if (!kinds.has_bias) return;
      const auto sb = static_cast<int64_t>(eb);
      for (int64_t j = 0; j < bias_heads; ++j) {
        b.emit(emit::dma(hw::Op::kLoad, kinds.bias, kScratch, kBufferReg,
                         lx.bias[bbuf] + static_cast<uint32_t>(j * rows * n * sb),
                         static_cast<uint64_t>(j * bias_view.strides[1] * sb + j0 * sb),
                         static_cast<uint64_t>(bias_view.strides[2] * sb), static_cast<uint32_t>(rows),
                         static_cast<uint32_t>(n * sb), true, kBiasTag + bbuf));
      }
    };
    // Causal: jump to `to` when the item's last row comes before key j0 (every later key is masked).
    const auto skip_if_masked = [&](int64_t j0, Builder::Label to) {
      first_row(b);
      b.emit(emit::li(kBodyReg, static_cast<uint64_t>(j0 - rows + 1)));
      b.branch(hw::Cond::kLt, kScratch, kBodyReg, to);
    };
    // `emit_for(jb)` unless (causal) every key of block jb is masked for this item.
    const auto unless_masked = [&](int64_t jb, const auto& emit_for) {
      const Builder::Label masked = b.label();
      if (kinds.causal) skip_if_masked(jb * kb, masked);
      emit_for(jb);
      b.bind(masked);
    };
    // S = Q Kb^T for block jb, into its score buffer (the PT arrays work on while the SFP goes on).
    const auto scores = [&](int64_t jb) {
      const int64_t n = std::min(kb, d.keys - jb * kb);
      const auto buf = static_cast<uint32_t>(jb % 2), kbuf = static_cast<uint32_t>(jb % kKBufs);
      b.emit(emit::wait_tags(1u << (kKTag + kbuf)));
      sfp(b, hw::Op::kTranspose, type, lx.kt[buf], lx.kbuf[kbuf], 0, n, dim);
      if (jb == 0) b.emit(emit::wait_tags(1u << kQTag));
      matmul(b, type, lx.s[buf], lx.q, lx.kt[buf], rr, dim, n, false);
    };
    load_block(0);
    if (blocks > 1) unless_masked(1, load_block);
    scores(0);
    // Items share one scratchpad plan: the last item's stores must have read O (and its
    // logsumexp) before this one writes them.
    b.emit(emit::wait_tags(1u << kStoreTag));
    for (int64_t jb = 0; jb < blocks; ++jb) {
      const int64_t j0 = jb * kb, n = std::min(kb, d.keys - j0);
      const auto buf = static_cast<uint32_t>(jb % 2), vbuf = static_cast<uint32_t>(jb % kVBufs),
                 bbuf = static_cast<uint32_t>(jb % kBiasBufs);
      const uint32_t s_buf = lx.s[buf], p_buf = lx.p[buf];
      const bool first = jb == 0;
      if (kinds.causal && !first) skip_if_masked(j0, epilogue);
      if (jb + 1 < blocks) unless_masked(jb + 1, scores);
      if (jb + 2 < blocks) unless_masked(jb + 2, load_block);
      if (scale != 1) binary(b, BinaryFn::kMul, s_buf, s_buf, Bcast::kFull, 0, Bcast::kImm, rr, n, scale);
      // The mask.
      if (kinds.has_bias) {
        b.emit(emit::wait_tags(1u << (kBiasTag + bbuf)));
        const int64_t sb = static_cast<int64_t>(eb);
        for (int64_t j = 0; j < gs; ++j) {
          const uint32_t s_j = s_buf + static_cast<uint32_t>(j * rows * n * 4);
          const uint32_t src = lx.bias[bbuf] + static_cast<uint32_t>((kinds.bias_per_head ? j : 0) * rows * n * sb);
          if (kinds.bias == DType::kBool) {
            keep_or(b, s_j, src, s_j, -kInf, rows, n);
            continue;
          }
          uint32_t add = src;
          if (kinds.bias != DType::kF32) {
            sfp(b, hw::Op::kConvert, DType::kF32, lx.biasf, src, static_cast<uint64_t>(kinds.bias), rows, n);
            add = lx.biasf;
          }
          binary(b, BinaryFn::kAdd, s_j, s_j, Bcast::kFull, add, Bcast::kFull, rows, n);
        }
      } else if (kinds.causal) {  // key j0 + c is kept for row i0 + i when j0 + c <= i0 + i
        const Builder::Label visible = b.label();
        first_row(b);
        b.emit(emit::li(kBodyReg, static_cast<uint64_t>(j0 + n - 1)));
        b.branch(hw::Cond::kGe, kScratch, kBodyReg, visible);  // every key of the block is visible
        hw::Instr rows_iota = emit::sfp(hw::Op::kIota, DType::kF32, kBufferReg, lx.rowi, emit::double_bits(0),
                                        emit::double_bits(1), static_cast<uint32_t>(rows), 1);
        rows_iota.regs = hw::pack_regs(kScratch, kBufferReg);
        b.emit(rows_iota);
        sfp(b, hw::Op::kIota, DType::kF32, lx.coli, emit::double_bits(static_cast<double>(j0)), emit::double_bits(1), 1,
            n);
        binary(b, BinaryFn::kLe, lx.keep, lx.coli, Bcast::kRow, lx.rowi, Bcast::kCol, rows, n);
        for (int64_t j = 0; j < gs; ++j) {
          const uint32_t s_j = s_buf + static_cast<uint32_t>(j * rows * n * 4);
          keep_or(b, s_j, lx.keep, s_j, -kInf, rows, n);
        }
        b.bind(visible);
      }
      // The online softmax.
      sfp(b, hw::Op::kReduce, DType::kF32, first ? lx.m : lx.mb, s_buf, static_cast<uint64_t>(ReduceFn::kMax), rr, n);
      const uint32_t mn = first ? lx.m : lx.mn;
      if (!first) binary(b, BinaryFn::kMax, mn, lx.m, Bcast::kFull, lx.mb, Bcast::kFull, 1, rr);
      binary(b, BinaryFn::kNe, lx.ok, mn, Bcast::kFull, 0, Bcast::kImm, 1, rr, -kInf);
      keep_or(b, lx.ms, lx.ok, mn, 0, 1, rr);
      if (!first) {
        binary(b, BinaryFn::kSub, lx.tmp, lx.m, Bcast::kFull, lx.ms, Bcast::kFull, 1, rr);
        unary(b, UnaryFn::kExp, lx.alpha, lx.tmp, 1, rr);
        unary(b, UnaryFn::kCopy, lx.m, lx.mn, 1, rr);
      }
      binary(b, BinaryFn::kSub, s_buf, s_buf, Bcast::kFull, lx.ms, Bcast::kCol, rr, n);
      unary(b, UnaryFn::kExp, s_buf, s_buf, rr, n);
      sfp(b, hw::Op::kReduce, DType::kF32, first ? lx.l : lx.lb, s_buf, static_cast<uint64_t>(ReduceFn::kSum), rr, n);
      if (!first) sfp(b, hw::Op::kFma, DType::kF32, lx.l, emit::pack2(lx.l, lx.alpha), lx.lb, 1, rr);
      if (p_buf != s_buf) sfp(b, hw::Op::kConvert, type, p_buf, s_buf, static_cast<uint64_t>(DType::kF32), rr, n);
      b.emit(emit::wait_tags(1u << (kVTag + vbuf)));
      if (!first) binary(b, BinaryFn::kMul, lx.o, lx.o, Bcast::kFull, lx.alpha, Bcast::kCol, rr, vdim);
      matmul(b, type, lx.o, p_buf, lx.vbuf[vbuf], rr, n, vdim, !first);
    }
    b.bind(epilogue);
    b.emit(emit::wait_tags(kPrefetchMask));  // a skipped block's prefetch must land before the next item
    // out = O / l (a row with l = 0 has O = 0 and divides by 1).
    binary(b, BinaryFn::kGt, lx.ok, lx.l, Bcast::kFull, 0, Bcast::kImm, 1, rr, 0);
    keep_or(b, lx.tmp, lx.ok, lx.l, 1, 1, rr);
    binary(b, BinaryFn::kDiv, lx.o, lx.o, Bcast::kFull, lx.tmp, Bcast::kCol, rr, vdim);
    if (lx.oc != lx.o) sfp(b, hw::Op::kConvert, out_type, lx.oc, lx.o, static_cast<uint64_t>(DType::kF32), rr, vdim);
    const uint32_t out_at = rows_at(b, operand_reg(kOut), s_ol);
    for (int64_t j = 0; j < gs; ++j) {
      b.emit(emit::dma(hw::Op::kStore, out_type, out_at, kBufferReg,
                       lx.oc + static_cast<uint32_t>(j * rows * vdim * seo), static_cast<uint64_t>(j * s_oh),
                       static_cast<uint64_t>(s_ol), static_cast<uint32_t>(rows), static_cast<uint32_t>(vdim * seo),
                       true, kStoreTag));
    }
    if (!lse) return;
    // lse = ms + log l, in lb.
    unary(b, UnaryFn::kLog, lx.lb, lx.l, 1, rr);
    binary(b, BinaryFn::kAdd, lx.lb, lx.ms, Bcast::kFull, lx.lb, Bcast::kFull, 1, rr);
    item_address(b, kScratch, lse_view, 4);
    const int64_t sh = lse_view.strides[1] * 4, sl = lse_view.strides[2] * 4;
    for (int64_t j = 0; j < gs; ++j) {
      const uint32_t src = lx.lb + static_cast<uint32_t>(j * rows * 4);
      if (sl == 4 || rows == 1) {
        b.emit(emit::dma(hw::Op::kStore, DType::kF32, kScratch, kBufferReg, src, static_cast<uint64_t>(j * sh), 0, 1,
                         static_cast<uint32_t>(rows * 4), true, kStoreTag));
      } else {
        b.emit(emit::dma(hw::Op::kStore, DType::kF32, kScratch, kBufferReg, src, static_cast<uint64_t>(j * sh),
                         static_cast<uint64_t>(sl), static_cast<uint32_t>(rows), 4, true, kStoreTag));
      }
    }
  };
  return kn;
}

}  // namespace spyre::compiler::lower
