// The resident-B matmul plan. The cores form a gm x gn grid over each output matrix: core (i, j)
// owns rows [i R, (i + 1) R) and columns [j C, (j + 1) C). Its K x C panel of B is loaded once,
// during its first strip of rows, and stays in the scratchpad; every later strip streams only its
// rows of A. So A and B each cross the memory once (the compulsory traffic), where streamed
// panels load B once per super-block.
//
// A tiles are multicast along a grid row and B tiles down a grid column, each in pieces issued by
// every member of the row or column, so that the loads spread over the ring as uniform traffic
// does instead of crowding the links next to a few issuers. A BARRIER per step tells the
// receivers that the step's tiles have landed.
//
// Strips shrink towards the end (R = 512 might run as 304, 120, 48, 24, 16 rows): a strip's
// stores go out in chunks during the next strip's steps, and only the last, short strip's stores
// have nothing to hide behind. The first strip's first K step is a quarter step, so that the loads
// nothing overlaps are short. The steps are unrolled (each B tile has its own address), so the
// program grows with them, up to kMaxInstructions.
//
// The plan is chosen when its estimate beats the streamed plans' (matmul.cpp): the estimate counts
// per step the slower of the PT work and the step's traffic, on the memory channels and on the
// ring's busiest link for that mix of loads and stores (hw::CardFigures::ring_link_shares).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "layout.h"
#include "matmul.h"

namespace spyre::compiler::lower {
namespace {

using hw::DType;
using schedule::level_reg;
using schedule::operand_reg;

// Body registers: a temp, this core's A and B base addresses, its grid row and column, the rank
// sets it multicasts to, and the device address of the strip being stored. The nest keeps level
// 0's counter, so the plan takes at most one batch level.
constexpr uint32_t kTmp = 6, kABase = 7, kBBase = 8;
constexpr uint32_t kRow = level_reg(1), kCol = level_reg(2), kSetA = level_reg(3), kSetB = level_reg(4);
constexpr uint32_t kOut = schedule::kBodyReg;
// The steps are unrolled, so the program grows with the strips, the steps and the pieces: at most
// this many instructions (128 KiB), where the streamed plans take a few KiB whatever the size.
constexpr int64_t kMaxInstructions = 4096;
// Cycles a step spends off the PT array: the barrier, the waits and the step's instructions, and
// per piece of a tile, the test of whether this core issues it.
constexpr double kStepOverhead = 64.0, kPieceOverhead = 4.0;

struct Plan {
  int64_t gm = 0, gn = 0, tk = 0, cols = 0;  // the grid, the K step, this core's columns C
  std::vector<int64_t> strips;               // rows per strip, in order (they sum to R)
  double cycles = 0;                         // the estimate
};

// Strips: the first of `first` rows (the one that loads B: the larger, the more PT work hides the
// B traffic), then each `shrink` times the one before (in 8s, at least 8), so that a strip's PT
// work still hides the previous one's stores while the last strip, whose stores nothing hides,
// is short: rows 512, first 256, shrink 0.5 give 256, 128, 64, 32, 16, 8, 8.
std::vector<int64_t> strips_of(int64_t rows, int64_t first, double shrink) {
  std::vector<int64_t> strips{std::min(first, rows)};
  for (int64_t left = rows - strips[0]; left > 0;) {
    const auto want = static_cast<int64_t>(std::ceil(static_cast<double>(strips.back()) * shrink / 8.0)) * 8;
    int64_t s = std::min(std::max<int64_t>(want, 8), left);
    if (left - s < 8) s = left;
    strips.push_back(s);
    left -= s;
  }
  return strips;
}

// K steps with the first split into a quarter and the rest (when the quarter is a whole number of
// 8-element rows): 128, 128 becomes 32, 96, 128.
std::vector<int64_t> ramped(std::vector<int64_t> ks) {
  if (ks.size() < 2 || ks[0] % 32 != 0) return ks;
  const int64_t quarter = ks[0] / 4;
  ks[0] -= quarter;
  ks.insert(ks.begin(), quarter);
  return ks;
}

// The strip's stores go out in this many chunks of whole rows during the next strip's steps.
int64_t chunks_of(int64_t rows, int64_t steps) {
  int64_t chunks = std::max<int64_t>(std::min(steps, rows), 1);
  while (rows % chunks != 0) --chunks;
  return chunks;
}

// Cycles to move `loads` and `stores` bytes: the memory channels carry both, and the ring's
// busiest link direction for this mix of them bounds it too.
struct Traffic {
  explicit Traffic(const Target& t) : target(t), links(t.ring_link_shares()) {}
  double cycles(double loads, double stores) const {
    double ring = 0;
    for (const hw::CardFigures::LinkShare& l : links) ring = std::max(ring, l.load * loads + l.store * stores);
    return std::max((loads + stores) / target.memory_bytes_per_cycle(), ring / target.ring_bytes_per_cycle);
  }
  const Target& target;
  std::vector<hw::CardFigures::LinkShare> links;
};

// Cycles of one item: per step the slower of its PT work and its traffic (the step's loads, its
// share of the previous strip's stores) plus the barrier, then each strip's epilogue; plus the
// first step's loads and the last strip's stores, which nothing overlaps.
double estimate(const MatmulProblem& p, const Target& t, const Traffic& traffic, const Plan& pl) {
  const double es = static_cast<double>(p.es), es_o = static_cast<double>(p.es_o);
  const double tk = static_cast<double>(pl.tk), cols = static_cast<double>(pl.cols);
  const double steps = static_cast<double>(p.K / pl.tk), b_step = static_cast<double>(pl.gn) * tk * cols * es;
  double cycles = 0, loads = 0, stores = 0, pending = 0;
  for (size_t i = 0; i < pl.strips.size(); ++i) {
    const double rows = static_cast<double>(pl.strips[i]);
    const double load = static_cast<double>(pl.gm) * rows * tk * es + (i == 0 ? b_step : 0.0);
    const double compute = rows * cols * tk / p.macs_per_cycle;
    const double pieces = static_cast<double>(pl.gn + (i == 0 ? pl.gm : 0));
    cycles +=
        steps * (std::max(compute, traffic.cycles(load, pending / steps)) + kStepOverhead + kPieceOverhead * pieces) +
        rows * cols / t.sfp_lanes;
    loads += steps * load;
    stores += pending;
    pending = static_cast<double>(t.cores) * rows * cols * es_o;
  }
  const double ramp = steps > 1 && pl.tk % 32 == 0 ? 0.25 : 1.0;  // the first step's share of tk (ramped)
  const double first = ramp * traffic.cycles(static_cast<double>(pl.gm * pl.strips[0]) * tk * es + b_step, 0);
  return std::max(cycles, traffic.cycles(loads, stores)) + first + traffic.cycles(0, pending);
}

// The most rows a strip may have: the scratchpad holds the B panel (and its staging, when B is
// transposed) and, per row of the strip, the accumulator, A's buffers, the output and the bias.
int64_t fitting_rows(const MatmulProblem& p, const Target& t, int64_t tk, int64_t cols) {
  const auto k = static_cast<uint64_t>(p.K), c = static_cast<uint64_t>(cols), step = static_cast<uint64_t>(tk);
  const uint64_t fixed = k * c * p.es + (p.B.transposed ? 2 * step * c * p.es : 0) + uint64_t{16} * 128;  // alignment
  const uint64_t per_row = c * 4 + (p.A.transposed ? 3 : 2) * step * p.es + epilogue_bytes(p, 1, c);
  return fixed >= t.lx_bytes ? 0 : static_cast<int64_t>((t.lx_bytes - fixed) / per_row);
}

// About the instructions the plan emits: per step the waits, the barrier, three per piece, the
// stores and the matmul; per strip its epilogue.
int64_t instructions(const Plan& pl, int64_t steps) {
  const auto strips = static_cast<int64_t>(pl.strips.size());
  return 16 + strips * (steps * (8 + 3 * pl.gn) + 24) + steps * 3 * pl.gm;
}

std::optional<Plan> choose(const MatmulProblem& p, const Target& t) {
  int64_t batch_levels = 0, items = 1;
  for (int64_t s : p.batch) {
    batch_levels += s > 1 ? 1 : 0;
    items *= s;
  }
  const int64_t cores = t.cores, tk = std::min<int64_t>(p.K, 128);
  if (cores < 2 || batch_levels > 1 || tk == 0 || p.K % tk != 0) return std::nullopt;
  const int64_t steps = p.K / tk;
  const Traffic traffic(t);
  std::optional<Plan> best;
  for (int64_t gm = 1; gm <= cores; ++gm) {
    const int64_t gn = cores / gm;
    if (gm * gn != cores || p.M % gm != 0 || p.N % gn != 0) continue;
    const int64_t rows = p.M / gm, cols = p.N / gn;
    if (cols > static_cast<int64_t>(hw::kMatmulDimMask)) continue;
    // The first strip: as many rows as fit, or fewer, in 16s.
    const int64_t fit = std::min(fitting_rows(p, t, tk, cols), rows);
    for (int64_t first = fit >= 16 ? fit / 16 * 16 : fit; first >= 8; first -= first > 16 ? 16 : 8) {
      for (const double shrink : {0.25, 0.375, 0.5, 0.75, 1.0}) {
        Plan pl{gm, gn, tk, cols, strips_of(rows, first, shrink), 0};
        if (instructions(pl, steps) > kMaxInstructions) continue;
        pl.cycles = static_cast<double>(items) * estimate(p, t, traffic, pl);
        if (!best || pl.cycles < best->cycles) best = std::move(pl);
      }
    }
  }
  return best;
}

}  // namespace

std::optional<Kernel> lower_matmul_resident(const MatmulProblem& p, const Target& t, double best) {
  const std::optional<Plan> chosen = choose(p, t);
  if (!chosen || chosen->cycles >= best) return std::nullopt;
  const Plan& pl = *chosen;
  const int64_t gm = pl.gm, gn = pl.gn, tk = pl.tk, C = pl.cols, R = p.M / gm, steps = p.K / tk;
  const auto es = static_cast<int64_t>(p.es), es_o = static_cast<int64_t>(p.es_o);
  const auto eb = static_cast<int64_t>(p.es_bias);
  const int64_t most = *std::max_element(pl.strips.begin(), pl.strips.end());

  Kernel k = matmul_kernel(p);
  k.nest.replicated = true;
  LxPlan lx;
  const uint64_t tile_b = static_cast<uint64_t>(tk * C * es), tile_a = static_cast<uint64_t>(most * tk * es);
  const uint32_t panel = lx.take(static_cast<uint64_t>(steps) * tile_b);
  const uint32_t bstage[2] = {p.B.transposed ? lx.take(tile_b) : 0, p.B.transposed ? lx.take(tile_b) : 0};
  const uint32_t acc = lx.take(static_cast<uint64_t>(most * C) * 4);
  const uint32_t abuf[2] = {lx.take(tile_a), lx.take(tile_a)};
  const uint32_t at = p.A.transposed ? lx.take(tile_a) : 0;
  const EpilogueLx epi{acc, p.bias ? lx.take(static_cast<uint64_t>(most * C * eb)) : 0,
                       p.bias ? lx.take(static_cast<uint64_t>(most * C) * 4) : 0,
                       lx.take(static_cast<uint64_t>(most * C * es_o)),
                       p.residual ? lx.take(static_cast<uint64_t>(most * C) * p.es_o) : 0};
  if (lx.used() > t.lx_bytes) throw std::logic_error("compiler: the resident matmul plan overfills the scratchpad");

  // K in steps of tk; the first strip starts with a quarter step and the rest of it, so that the
  // loads nothing overlaps (the first step's) are short.
  const std::vector<int64_t> ks_rest(static_cast<size_t>(steps), tk), first_ks = ramped(ks_rest);

  k.body = [=](emit::Builder& bld, uint32_t) {
    // r[dst] = r[base] + this core's block offset in a tensor with these row and column strides
    // (bytes) + extra.
    const auto block_address = [&](uint32_t dst, uint32_t base, int64_t row_bytes, int64_t col_bytes, int64_t extra) {
      bld.emit(emit::muli(dst, kRow, R * row_bytes));
      bld.emit(emit::muli(kTmp, kCol, C * col_bytes));
      bld.emit(emit::add(dst, dst, kTmp));
      bld.emit(emit::add(dst, dst, base));
      if (extra != 0) bld.emit(emit::addi(dst, dst, extra));
    };
    // Grid row i = rank / gn, column j = rank % gn; A panel i goes along row i, B panel j down column j.
    bld.emit(emit::rank(kTmp));
    bld.emit(emit::divu(kRow, kTmp, static_cast<uint64_t>(gn)));
    bld.emit(emit::remu(kCol, kTmp, static_cast<uint64_t>(gn)));
    bld.emit(emit::muli(kABase, kRow, R * p.sa_m * es));
    bld.emit(emit::add(kABase, kABase, operand_reg(0)));
    bld.emit(emit::muli(kBBase, kCol, C * p.sb_n * es));
    bld.emit(emit::add(kBBase, kBBase, operand_reg(1)));
    bld.emit(emit::muli(kSetA, kRow, gn));
    bld.emit(emit::addi(kSetA, kSetA, static_cast<int64_t>(hw::pack_rank_set(0, 1, static_cast<uint64_t>(gn)))));
    bld.emit(emit::addi(kSetB, kCol, static_cast<int64_t>(hw::pack_rank_set(0, static_cast<uint64_t>(gn), gm))));
    // Every core is done with the previous item's scratchpad before this one's tiles land in it.
    bld.emit(emit::instr(hw::Op::kBarrier));

    // Step g is step s of strip `strip` (whose first row is row0), over K [k0, k0 + kt).
    struct Step {
      size_t strip;
      int64_t s, row0, k0, kt;
    };
    std::vector<Step> order;
    std::vector<int64_t> strip_steps;
    for (size_t i = 0, row0 = 0; i < pl.strips.size(); row0 += static_cast<size_t>(pl.strips[i]), ++i) {
      const std::vector<int64_t>& ks = i == 0 ? first_ks : ks_rest;
      for (int64_t s = 0, k0 = 0; s < static_cast<int64_t>(ks.size()); k0 += ks[static_cast<size_t>(s)], ++s) {
        order.push_back({i, s, static_cast<int64_t>(row0), k0, ks[static_cast<size_t>(s)]});
      }
      strip_steps.push_back(static_cast<int64_t>(ks.size()));
    }
    const auto slot_of = [&](int64_t k0) { return panel + static_cast<uint32_t>(k0 * C * es); };
    // A tile of `rows` rows goes out in pieces of whole rows, one per member of the grid row (A)
    // or column (B) as far as the rows divide: piece q from member q * group / pieces. So every
    // core issues its share of every step, and the loads spread over the ring as evenly as the
    // cores do.
    const auto issue = [&](uint32_t me, int64_t group, uint32_t base, uint32_t set, uint32_t dst, int64_t offset,
                           int64_t stride, int64_t rows, int64_t row_bytes, uint32_t tag) {
      int64_t pieces = group;
      while (rows % pieces != 0 || group % pieces != 0) --pieces;
      const int64_t part = rows / pieces;
      for (int64_t q = 0; q < pieces; ++q) {
        const emit::Builder::Label skip = bld.label();
        bld.emit(emit::li(kTmp, static_cast<uint64_t>(q * (group / pieces))));
        bld.branch(hw::Cond::kNe, me, kTmp, skip);
        bld.emit(emit::dma(hw::Op::kLoadMulticast, p.compute, base, set,
                           dst + static_cast<uint32_t>(q * part * row_bytes),
                           static_cast<uint64_t>(offset + q * part * stride), static_cast<uint64_t>(stride),
                           static_cast<uint32_t>(part), static_cast<uint32_t>(row_bytes), true, tag));
        bld.bind(skip);
      }
    };
    const auto load = [&](size_t g) {
      const Step st = order[g];
      const int64_t rows = pl.strips[st.strip];
      const auto buf = static_cast<uint32_t>(g % 2);
      const int64_t a_at = (st.row0 * p.sa_m + st.k0 * p.sa_k) * es, kt = st.kt;
      if (p.A.transposed) {  // tk rows of `rows`, along K
        issue(kCol, gn, kABase, kSetA, abuf[buf], a_at, p.A.inner * es, kt, rows * es, matmul_tag_a(buf));
      } else {
        issue(kCol, gn, kABase, kSetA, abuf[buf], a_at, p.A.outer * es, rows, kt * es, matmul_tag_a(buf));
      }
      if (st.strip != 0) return;  // B is resident after the first strip
      const int64_t b_at = st.k0 * p.sb_k * es;
      if (p.B.transposed) {  // C rows of tk, along N, transposed into the panel by every core
        issue(kRow, gm, kBBase, kSetB, bstage[buf], b_at, p.B.inner * es, C, kt * es, matmul_tag_b(buf));
      } else {
        issue(kRow, gm, kBBase, kSetB, slot_of(st.k0), b_at, p.B.outer * es, kt, C * es, matmul_tag_b(buf));
      }
    };

    load(0);
    for (size_t g = 0; g < order.size(); ++g) {
      const Step st = order[g];
      const int64_t rows = pl.strips[st.strip];
      const auto buf = static_cast<uint32_t>(g % 2);
      const uint32_t slot = slot_of(st.k0);
      const auto kt = static_cast<uint32_t>(st.kt);
      const int64_t strip_steps_here = strip_steps[st.strip];
      // Each issuer waits for its tiles of this step; after the barrier they are in every receiver,
      // and every core is done with the other buffers, so the next step may land there.
      bld.emit(emit::wait_tags(1u << matmul_tag_a(buf) | 1u << matmul_tag_b(buf)));
      bld.emit(emit::instr(hw::Op::kBarrier));
      // The next step's loads first: at the channels and links they queue ahead of the stores,
      // which only the next epilogue waits for.
      if (g + 1 < order.size()) load(g + 1);
      if (st.strip > 0) {  // chunk s of the previous strip's stores
        const int64_t prev = pl.strips[st.strip - 1], chunks = chunks_of(prev, strip_steps_here), chunk = prev / chunks;
        if (st.s < chunks) {
          bld.emit(emit::dma(hw::Op::kStore, p.out_type, kOut, 0,
                             epi.out + static_cast<uint32_t>(st.s * chunk * C * es_o),
                             static_cast<uint64_t>(st.s * chunk * p.so_m * es_o), static_cast<uint64_t>(p.so_m * es_o),
                             static_cast<uint32_t>(chunk), static_cast<uint32_t>(C * es_o), true, kMatmulTagStore));
        }
      }
      if (p.B.transposed && st.strip == 0) {
        bld.emit(emit::sfp(hw::Op::kTranspose, p.compute, 0, slot, bstage[buf], 0, static_cast<uint32_t>(C), kt));
      }
      uint32_t pa = abuf[buf];
      if (p.A.transposed) {
        bld.emit(emit::sfp(hw::Op::kTranspose, p.compute, 0, at, abuf[buf], 0, kt, static_cast<uint32_t>(rows)));
        pa = at;
      }
      hw::Instr in = emit::instr(hw::Op::kMatmul);
      in.dtype = p.compute;
      in.flags = st.s > 0 ? hw::kMatmulAccumulate : 0;  // the first step overwrites the accumulator
      in.a = acc;
      in.b = emit::pack2(pa, slot);
      in.c = hw::pack_mkn(static_cast<uint64_t>(rows), kt, static_cast<uint64_t>(C));
      bld.emit(in);
      if (st.s + 1 < strip_steps_here) continue;

      // The strip's epilogue; its stores go out during the next strip (the last one's at once).
      if (p.bias) block_address(kOut, operand_reg(3), p.sbias_m * eb, p.sbias_n * eb, 0);
      const auto residual_at = [&](emit::Builder&) -> std::pair<uint32_t, uint64_t> {
        block_address(kOut, operand_reg(2), p.so_m * es_o, p.so_n * es_o, 0);
        emit_residual_address(bld, p, kOut, kTmp);
        return {kOut, static_cast<uint64_t>(st.row0 * p.so_m * es_o)};
      };
      emit_matmul_epilogue(bld, p, epi, static_cast<uint32_t>(rows), static_cast<uint32_t>(C), kOut,
                           static_cast<uint64_t>(st.row0 * p.sbias_m * eb), residual_at);
      block_address(kOut, operand_reg(2), p.so_m * es_o, p.so_n * es_o, st.row0 * p.so_m * es_o);
      if (st.strip + 1 == pl.strips.size()) {
        bld.emit(emit::dma(hw::Op::kStore, p.out_type, kOut, 0, epi.out, 0, static_cast<uint64_t>(p.so_m * es_o),
                           static_cast<uint32_t>(rows), static_cast<uint32_t>(C * es_o), true, kMatmulTagStore));
      }
    }
  };
  return k;
}

}  // namespace spyre::compiler::lower
