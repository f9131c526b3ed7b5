// Matmul family: mm, bmm, addmm, baddbmm and everything built on them. The output is tiled into
// tm x tn blocks (the items of the nest, over batch, row and column tiles, divided over the cores);
// each block accumulates its K dimension in tk steps in an fp32 accumulator, with the A and B tiles
// of the next step loading (asynchronously, into the other of two buffers) while the PT array works
// on the current one. Transposed operands load along their contiguous dim and are transposed in the
// scratchpad. The epilogue scales, adds the bias, rounds once and stores asynchronously.
// Tile sizes come from the target's scratchpad, so every size the config accepts works.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "layout.h"
#include "matmul.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::lower {
namespace {

using hw::Bcast;
using hw::DType;
using schedule::operand_reg;

constexpr uint32_t kTagStore = kMatmulTagStore;
constexpr uint32_t tag_a(int i) {
  return matmul_tag_a(static_cast<uint32_t>(i));
}
constexpr uint32_t tag_b(int i) {
  return matmul_tag_b(static_cast<uint32_t>(i));
}
// Body registers: A and B cursors (free once the nest's prologue has run), steps left, a temp;
// shared panels also take the registers of nest levels 3 and 4 (so the nest has at most 3) for
// the rank sets this core multicasts to (zero: it issues none).
constexpr uint32_t kCurA = 7, kCurB = 8, kSteps = schedule::kBodyReg, kTmp = 6;
constexpr uint32_t kSetA = schedule::level_reg(3), kSetB = schedule::level_reg(4);
// Shared panels store each block in chunks during the next super-block's steps (so that the
// stores of all the cores do not queue in front of its first loads): r[kPending] is the device
// address of the block's next chunk, kNothing when no block is pending.
constexpr uint32_t kPending = schedule::kBufferReg;
constexpr uint64_t kNothing = ~uint64_t{0};

using Operand = MatmulOperand;

// A [rows x cols] operand with strides (s_rows, s_cols): rows of contiguous columns, or transposed.
Operand layout_of(int64_t rows, int64_t cols, int64_t s_rows, int64_t s_cols, const char* what) {
  if (s_cols == 1 || cols == 1) return {false, s_rows, s_cols};
  if (s_rows == 1 || rows == 1) return {true, s_rows, s_cols};
  throw Unsupported(fmt::format("compiler: matmul operand {} has no contiguous dim", what));
}

// Step tiles of an operand in the scratchpad: two buffers (one loads while the PT arrays read the
// other), or, pipelined, three (the arrays may still read the one before); a transposed operand
// is read from its transpose instead, so it keeps two buffers and takes one transpose, or two.
struct StepTiles {
  int raws = 0, transposes = 0;
  uint64_t count() const { return static_cast<uint64_t>(raws) + static_cast<uint64_t>(transposes); }
};
StepTiles step_tiles(const Operand& op, bool pipe) {
  if (op.transposed) return {2, pipe ? 2 : 1};
  return {pipe ? 3 : 2, 0};
}

Bcast bias_mode(int64_t s_rows, int64_t s_cols, int64_t rows, int64_t cols) {
  const bool same_row = s_rows == 0 || rows == 1, same_col = s_cols == 0 || cols == 1;
  if (!same_col && s_cols != 1) throw Unsupported("compiler: matmul bias columns are not contiguous");
  if (same_row && same_col) return Bcast::kScalar;
  if (same_row) return Bcast::kRow;
  if (same_col) return Bcast::kCol;
  return Bcast::kFull;
}

}  // namespace

void emit_residual_address(emit::Builder& bld, const MatmulProblem& p, uint32_t reg, uint32_t scratch) {
  const auto es_o = static_cast<int64_t>(p.es_o);
  bld.emit(emit::arg(scratch, p.out->arg));
  bld.emit(emit::muli(scratch, scratch, -1));
  bld.emit(emit::add(reg, reg, scratch));
  bld.emit(emit::arg(scratch, p.residual->arg));
  bld.emit(emit::add(reg, reg, scratch));
  bld.emit(emit::addi(reg, reg, (p.residual->offset - p.out->offset) * es_o));
}

uint64_t epilogue_bytes(const MatmulProblem& p, uint64_t m, uint64_t n) {
  return m * n * (p.es_o + (p.bias ? p.es_bias + 4 : 0) + (p.residual ? p.es_o : 0));
}

void emit_matmul_epilogue(emit::Builder& bld, const MatmulProblem& p, const EpilogueLx& lx, uint32_t mt, uint32_t nt,
                          uint32_t bias_reg, uint64_t bias_offset, const ResidualAt& residual_at) {
  if (p.alpha != 1.0) {
    bld.emit(emit::sfp(hw::Op::kBinary, DType::kF32, 0, lx.acc, emit::pack2(lx.acc, 0),
                       static_cast<uint64_t>(hw::BinaryFn::kMul) | uint64_t{f32_bits(p.alpha)} << 32, mt, nt,
                       hw::bcast_flags(Bcast::kFull, Bcast::kImm)));
  }
  if (p.bias) {
    const Bcast bc = p.bias_bc;
    const uint32_t rows = bc == Bcast::kRow || bc == Bcast::kScalar ? 1 : mt;
    const uint32_t cols = bc == Bcast::kCol || bc == Bcast::kScalar ? 1 : nt;
    const auto eb = static_cast<uint32_t>(p.es_bias);
    bld.emit(emit::dma(hw::Op::kLoad, p.bias_type, bias_reg, 0, lx.bias_raw, bias_offset,
                       static_cast<uint64_t>(p.sbias_m) * eb, rows, cols * eb, false, 0));
    const auto count = static_cast<uint32_t>(hw::bcast_elements(bc, mt, nt));
    bld.emit(emit::sfp(hw::Op::kConvert, DType::kF32, 0, lx.bias_f32, lx.bias_raw, static_cast<uint64_t>(p.bias_type),
                       1, count));
    if (p.beta != 1.0) {
      bld.emit(emit::sfp(hw::Op::kBinary, DType::kF32, 0, lx.bias_f32, emit::pack2(lx.bias_f32, 0),
                         static_cast<uint64_t>(hw::BinaryFn::kMul) | uint64_t{f32_bits(p.beta)} << 32, 1, count,
                         hw::bcast_flags(Bcast::kFull, Bcast::kImm)));
    }
    bld.emit(emit::sfp(hw::Op::kBinary, DType::kF32, 0, lx.acc, emit::pack2(lx.acc, lx.bias_f32),
                       static_cast<uint64_t>(hw::BinaryFn::kAdd), mt, nt, hw::bcast_flags(Bcast::kFull, bc)));
  }
  bld.emit(emit::wait_tags(1u << kMatmulTagStore));  // the previous block's store still reads the tile
  // As an unfused program: the value so far rounded into the output's type, then each fused op
  // on it in that type (an SFP function widens its operands, computes in fp32 and rounds once).
  // The accumulator is free after the first instruction.
  bld.emit(emit::sfp(hw::Op::kConvert, p.out_type, 0, lx.out, lx.acc, static_cast<uint64_t>(DType::kF32), mt, nt));
  if (p.activation != hw::UnaryFn::kCopy) {
    bld.emit(emit::sfp(hw::Op::kUnary, p.out_type, 0, lx.out, lx.out, static_cast<uint64_t>(p.activation), mt, nt));
  }
  if (p.residual) {
    const auto [reg, offset] = residual_at(bld);
    const auto eo = static_cast<uint32_t>(p.es_o);
    bld.emit(emit::dma(hw::Op::kLoad, p.out_type, reg, 0, lx.residual, offset, static_cast<uint64_t>(p.so_m) * eo, mt,
                       nt * eo, false, 0));
    bld.emit(emit::sfp(hw::Op::kBinary, p.out_type, 0, lx.out, emit::pack2(lx.out, lx.residual),
                       static_cast<uint64_t>(p.residual_fn), mt, nt));
  }
}

void add_matmul_level(Kernel& k, const MatmulProblem& p, uint64_t count, int64_t sa, int64_t sb, int64_t so,
                      int64_t sbias) {
  const auto es = static_cast<int64_t>(p.es), es_o = static_cast<int64_t>(p.es_o);
  schedule::Level l{count, {sa * es, sb * es, so * es_o}};
  if (p.bias) l.stride_bytes.push_back(sbias * static_cast<int64_t>(p.es_bias));
  k.nest.levels.push_back(std::move(l));
}

Kernel matmul_kernel(const MatmulProblem& p) {
  Kernel k;
  const auto es = static_cast<int64_t>(p.es);
  k.nest.operands = {{p.a->arg, p.a->offset * es},
                     {p.b->arg, p.b->offset * es},
                     {p.out->arg, p.out->offset * static_cast<int64_t>(p.es_o)}};
  if (p.bias) k.nest.operands.push_back({p.bias->arg, p.bias->offset * static_cast<int64_t>(p.es_bias)});
  for (size_t d = 0; d < p.batch.size(); ++d) {
    if (p.batch[d] > 1) {
      add_matmul_level(k, p, static_cast<uint64_t>(p.batch[d]), p.ba[d], p.bb[d], p.out->strides[d],
                       p.bias ? p.bias_full[d] : 0);
    }
  }
  return k;
}

// The matmul as the plans read it; nullopt when its output is empty.
std::optional<MatmulProblem> read_matmul(const ir::Graph& g, const ir::Matmul& mm, const Target& t) {
  MatmulProblem p;
  const ir::View& a = g.views.at(mm.a);
  const ir::View& b = g.views.at(mm.b);
  const ir::View& out = g.views.at(mm.out);
  const size_t nd = out.sizes.size();
  if (nd < 2 || a.sizes.size() < 2 || b.sizes.size() < 2) throw Malformed("compiler: matmul needs 2-d");
  if (!hw::dtype_is_float(mm.compute) || a.dtype != mm.compute || b.dtype != mm.compute) {
    throw Malformed("compiler: matmul operands must both have the (float) compute type");
  }
  const int64_t M = out.sizes[nd - 2], N = out.sizes[nd - 1], K = a.sizes.back();
  if (a.sizes[a.sizes.size() - 2] != M || b.sizes[b.sizes.size() - 2] != K || b.sizes.back() != N) {
    throw Malformed("compiler: matmul shapes do not agree");
  }
  if (M == 0 || N == 0) return std::nullopt;
  if (K == 0 && mm.bias < 0) throw Unsupported("compiler: an empty matmul is a fill");
  if (out.strides[nd - 1] != 1 && N != 1) throw Unsupported("compiler: matmul output rows not contiguous");
  p.a = &a;
  p.b = &b;
  p.out = &out;
  p.M = M;
  p.N = N;
  p.K = K;

  // Batch dims: the output's leading ones; a, b and the bias broadcast to them.
  p.batch.assign(out.sizes.begin(), out.sizes.end() - 2);
  const auto batch_strides = [&](const ir::View& v) {
    ir::View lead{v.arg, 0, {v.sizes.begin(), v.sizes.end() - 2}, {v.strides.begin(), v.strides.end() - 2}, v.dtype};
    return broadcast_strides(lead, p.batch);
  };
  p.ba = batch_strides(a);
  p.bb = batch_strides(b);
  p.sa_m = a.strides[a.sizes.size() - 2];
  p.sa_k = a.strides.back();
  p.sb_k = b.strides[b.sizes.size() - 2];
  p.sb_n = b.strides.back();
  p.so_m = out.strides[nd - 2];
  p.so_n = out.strides[nd - 1];
  p.A = layout_of(M, K, p.sa_m, p.sa_k, "a");
  p.B = layout_of(K, N, p.sb_k, p.sb_n, "b");
  if (mm.bias >= 0 && mm.beta != 0) {
    p.bias = &g.views.at(static_cast<size_t>(mm.bias));
    p.bias_full = broadcast_strides(*p.bias, out.sizes);
    p.sbias_m = p.bias_full[nd - 2];
    p.sbias_n = p.bias_full[nd - 1];
    p.bias_bc = bias_mode(p.sbias_m, p.sbias_n, M, N);
    p.bias_type = p.bias->dtype;
    p.es_bias = hw::dtype_size(p.bias->dtype);
  }
  p.es = hw::dtype_size(mm.compute);
  p.es_o = hw::dtype_size(out.dtype);
  p.compute = mm.compute;
  p.out_type = out.dtype;
  p.alpha = mm.alpha;
  p.beta = mm.beta;
  if (mm.activation >= hw::UnaryFn::kCount || hw::unary_is_bool(mm.activation)) {
    throw Malformed("compiler: a matmul's activation is a float function");
  }
  p.activation = mm.activation;
  if (mm.residual >= 0) {
    const ir::View& r = g.views.at(static_cast<size_t>(mm.residual));
    if (r.sizes != out.sizes || r.strides != out.strides || r.dtype != out.dtype) {
      throw Malformed("compiler: a matmul's residual has its output's shape, strides and type");
    }
    if (mm.residual_fn != hw::BinaryFn::kAdd && mm.residual_fn != hw::BinaryFn::kMul) {
      throw Malformed("compiler: a matmul's residual is added or multiplied");
    }
    p.residual = &r;
    p.residual_fn = mm.residual_fn;
  }
  p.macs_per_cycle = t.pt_macs_per_cycle() * (mm.compute == DType::kF32 ? t.fp32_rate : 1.0);
  return p;
}

std::optional<Kernel> lower_matmul(const ir::Graph& g, const ir::Matmul& mm, const Target& t) {
  const std::optional<MatmulProblem> read = read_matmul(g, mm, t);
  if (!read) return std::nullopt;
  const MatmulProblem& problem = *read;
  const ir::View* bias = problem.bias;
  const int64_t M = problem.M, N = problem.N, K = problem.K;
  const std::vector<int64_t>& batch = problem.batch;
  const int64_t sa_m = problem.sa_m, sa_k = problem.sa_k, sb_k = problem.sb_k, sb_n = problem.sb_n;
  const int64_t so_m = problem.so_m, so_n = problem.so_n, sbias_m = problem.sbias_m, sbias_n = problem.sbias_n;
  const Operand A = problem.A, B = problem.B;
  const uint64_t es = problem.es, es_o = problem.es_o, es_bias = problem.es_bias;
  const double macs_per_cycle = problem.macs_per_cycle;

  // Tile sizes: the largest that fit the scratchpad (fp32 accumulator, two buffers per operand
  // plus their transposes, the output and bias tiles). Pipelined, a step's MATMUL runs on while
  // the next step's panels arrive and are transposed: an operand the PT arrays read as loaded
  // takes a third buffer, a transposed one a second transpose.
  int64_t tm = std::min<int64_t>(M, 256), tn = std::min<int64_t>(N, 256), tk = std::min<int64_t>(K, 128);
  const auto need_for = [&](int64_t bm, int64_t bn, int64_t bk, bool pipe = false) {
    const uint64_t m = static_cast<uint64_t>(bm), n = static_cast<uint64_t>(bn), k = static_cast<uint64_t>(bk);
    return m * n * 4 + step_tiles(A, pipe).count() * m * k * es + step_tiles(B, pipe).count() * k * n * es +
           epilogue_bytes(problem, m, n) + uint64_t{16} * 128;
  };
  const auto need = [&] { return need_for(tm, tn, tk); };
  // SFP cycles of a step's transposes of bm x tk and tk x bn tiles.
  const auto transpose_cycles = [&](int64_t bm, int64_t bn) {
    const double per_cycle = static_cast<double>(t.sfp_lanes) * 2 / static_cast<double>(std::max<uint64_t>(es, 2));
    double c = 0;
    if (A.transposed) c += std::ceil(static_cast<double>(bm * tk) / per_cycle) + 16;
    if (B.transposed) c += std::ceil(static_cast<double>(tk * bn) / per_cycle) + 16;
    return c;
  };
  while (need() > t.lx_bytes) {
    if (tk >= tm && tk >= tn && tk > 8) {
      tk = (tk + 1) / 2;
    } else if (tm >= tn && tm > 8) {
      tm = (tm + 1) / 2;
    } else if (tn > 8) {
      tn = (tn + 1) / 2;
    } else {
      throw Unsupported("compiler: scratchpad too small for a matmul tile");
    }
  }

  // Work division: smaller blocks give more cores work but load A and B more often. Estimate each
  // choice as the slower of its loads (all cores share the ring) and its busiest core's PT time,
  // and keep the fastest (the largest blocks on a tie).
  int64_t blocks = 1;
  for (int64_t s : batch) blocks *= s;
  const auto estimate = [&](int64_t bm, int64_t bn) {
    const double m_tiles = static_cast<double>((M + bm - 1) / bm), n_tiles = static_cast<double>((N + bn - 1) / bn);
    const double tiles = static_cast<double>(blocks) * m_tiles * n_tiles;
    const double bytes =
        static_cast<double>(blocks) * static_cast<double>(K * es) * (m_tiles * n_tiles * static_cast<double>(bm + bn));
    const double per_core = std::ceil(tiles / t.cores) * static_cast<double>(bm * bn * K) / macs_per_cycle;
    return std::max(bytes / t.load_bytes_per_cycle(), per_core);
  };
  double best = estimate(tm, tn);
  const int64_t fit_m = tm, fit_n = tn;
  for (int64_t bm = fit_m; bm >= 16; bm = bm > 16 ? (bm + 1) / 2 : 0) {
    for (int64_t bn = fit_n; bn >= 16; bn = bn > 16 ? (bn + 1) / 2 : 0) {
      if (estimate(bm, bn) < 0.97 * best) {
        best = estimate(bm, bn);
        tm = bm;
        tn = bn;
      }
    }
  }

  // Shared panels: the cores as a gm x gn grid over a super-block of gm x gn output blocks. Each
  // A row panel is loaded once for its grid row and each B column panel once for its grid column
  // (LOAD_MULTICAST), so a step moves (gm tm + gn tn) tk elements for gm gn blocks instead of
  // (tm + tn) tk for one; a BARRIER per K step tells the receivers that the panels have landed.
  // Taken for whole tiles only (no tails), over every core, when the cost model says so; each core
  // adds the bias of its own block in the epilogue.
  struct Grid {
    int64_t gm = 0, gn = 0, tm = 0, tn = 0;
  } grid;
  const int64_t cores = t.cores;
  const auto levels_free = [&] {  // the shared body needs two level registers of its own
    int64_t n = 2;
    for (int64_t s : batch) n += s > 1 ? 1 : 0;
    return n <= 3;
  };
  if (cores > 1 && K % tk == 0 && levels_free()) {
    // Blocks up to 512 wide when the scratchpad holds them: a wider panel is reused by more of
    // the grid, so a step moves fewer bytes per multiply-add.
    const auto widest = [&](int64_t fit, int64_t dim) { return fit == 256 && dim % 512 == 0 ? 512 : fit; };
    const double bw = t.load_bytes_per_cycle();
    double best_shared = 0.9 * best;  // shared panels must beat every core loading its own tiles
    for (int64_t bm = widest(fit_m, M); bm >= 64; bm /= 2) {
      for (int64_t bn = widest(fit_n, N); bn >= 64; bn /= 2) {
        if (M % bm != 0 || N % bn != 0 || need_for(bm, bn, tk) > t.lx_bytes) continue;
        for (int64_t gm = 1; gm <= cores; ++gm) {
          const int64_t gn = cores / gm;
          if (gm * gn != cores || (M / bm) % gm != 0 || (N / bn) % gn != 0) continue;
          const double items = static_cast<double>(blocks * (M / bm / gm) * (N / bn / gn));
          const double steps = items * static_cast<double>(K / tk);
          const double step_bytes = static_cast<double>((gm * bm + gn * bn) * tk) * static_cast<double>(es);
          const double compute = static_cast<double>(bm * bn * tk) / macs_per_cycle;
          // The previous super-block's blocks go out in chunks during a super-block's steps.
          const double tail = static_cast<double>(cores * bm * bn) * static_cast<double>(es_o);
          const double memory = (step_bytes + tail / static_cast<double>(K / tk)) / bw;
          // Each step: the slower of its multicast loads (with the chunk stores beside them) and its
          // PT work, plus a barrier. Every core waits at the barrier for the latest panel, and the
          // fuller the memory is, the more often a burst on some channels makes a step late:
          // 4096^3 fp16 on the default card lost 23 % of its steps' time with the memory 82 % busy,
          // 6 % at 59 % busy; (busy^4) / 2 follows both. Each item adds its first load, which
          // nothing overlaps, and the last super-block's stores, with nothing to hide them.
          // Pipelined, the barrier and the transposes of a step run beside the previous step's
          // MATMUL; otherwise the PT arrays wait for them.
          const double busy = memory / compute, sfp = transpose_cycles(bm, bn);
          const bool pipe = need_for(bm, bn, tk, true) <= t.lx_bytes;
          const double surcharge = 1 + busy * busy * busy * busy / 2;
          const double step = pipe ? std::max(memory, std::max(compute, sfp + 64)) * surcharge
                                   : std::max(memory, compute) * surcharge + 64 + sfp;
          const double est = steps * step + (items * step_bytes + tail) / bw;
          if (est < best_shared) {
            best_shared = est;
            grid = {gm, gn, bm, bn};
          }
        }
      }
    }
    if (grid.gm > 0) best = best_shared;
  }
  const bool shared = grid.gm > 0;
  if (shared) {
    tm = grid.tm;
    tn = grid.tn;
  }

  if (auto resident = lower_matmul_resident(problem, t, best)) return resident;

  Kernel k = matmul_kernel(problem);
  k.nest.replicated = shared;
  const auto level = [&](uint64_t count, int64_t sa, int64_t sb, int64_t so, int64_t sbias) {
    add_matmul_level(k, problem, count, sa, sb, so, sbias);
  };
  if (shared) {  // one item per super-block; each core finds its block by rank
    const int64_t sm = grid.gm * tm, sn = grid.gn * tn;
    if (M > sm) {
      level(static_cast<uint64_t>(M / sm), sm * sa_m, 0, sm * so_m, sm * sbias_m);
    }
    if (N > sn) {
      level(static_cast<uint64_t>(N / sn), 0, sn * sb_n, sn * so_n, sn * sbias_n);
    }
  }
  const uint64_t m_tiles = shared ? 1 : static_cast<uint64_t>((M + tm - 1) / tm),
                 n_tiles = shared ? 1 : static_cast<uint64_t>((N + tn - 1) / tn);
  const int64_t m_tail = M - static_cast<int64_t>(m_tiles - 1) * tm,
                n_tail = N - static_cast<int64_t>(n_tiles - 1) * tn;
  uint32_t m_bit = 0, n_bit = 0;
  if (m_tiles > 1) {
    level(m_tiles, tm * sa_m, 0, tm * so_m, tm * sbias_m);
    if (m_tail != tm) {
      m_bit = 1u << k.nest.tail_levels.size();
      k.nest.tail_levels.push_back(static_cast<uint32_t>(k.nest.levels.size() - 1));
    }
  }
  if (n_tiles > 1) {
    level(n_tiles, 0, tn * sb_n, tn * so_n, tn * sbias_n);
    if (n_tail != tn) {
      n_bit = 1u << k.nest.tail_levels.size();
      k.nest.tail_levels.push_back(static_cast<uint32_t>(k.nest.levels.size() - 1));
    }
  }
  // One fixed layout (no halves): the body double-buffers the K steps itself, or, pipelined,
  // keeps a step's MATMUL running while the next step's tiles land and are transposed.
  const bool pipe = need_for(tm, tn, tk, true) <= t.lx_bytes;
  LxPlan lx;
  const uint64_t tile_a = static_cast<uint64_t>(tm * tk) * es, tile_b = static_cast<uint64_t>(tk * tn) * es;
  const uint32_t acc = lx.take(static_cast<uint64_t>(tm * tn) * 4);
  // Buffer i of step s is s % count; the loop is unrolled over `period` steps, a multiple of each.
  struct Tiles : StepTiles {
    uint32_t raw[3] = {}, transposed[2] = {};
  };
  const auto tiles_of = [&](const Operand& op, uint64_t bytes) {
    Tiles tl;
    static_cast<StepTiles&>(tl) = step_tiles(op, pipe);
    for (int i = 0; i < tl.raws; ++i) tl.raw[i] = lx.take(bytes);
    for (int i = 0; i < tl.transposes; ++i) tl.transposed[i] = lx.take(bytes);
    return tl;
  };
  const Tiles ta = tiles_of(A, tile_a), tb = tiles_of(B, tile_b);
  int period = 1;
  for (const int n : {ta.raws, ta.transposes, tb.raws, tb.transposes}) {
    if (n > 0 && period % n != 0) period *= n;  // the counts are 1, 2 and 3
  }
  const uint32_t outc = lx.take(static_cast<uint64_t>(tm * tn) * es_o);
  const uint32_t braw = bias ? lx.take(static_cast<uint64_t>(tm * tn) * es_bias) : 0;
  const uint32_t bf32 = bias ? lx.take(static_cast<uint64_t>(tm * tn) * 4) : 0;
  const uint32_t res = problem.residual ? lx.take(static_cast<uint64_t>(tm * tn) * es_o) : 0;

  const DType compute = problem.compute, out_type = problem.out_type;
  const int64_t full_steps = K / tk, k_tail = K % tk;
  // Shared: the pending block goes out in `chunks` chunks of whole rows, one per step.
  int64_t chunks = std::max<int64_t>(std::min(full_steps, tm), 1);
  while (tm % chunks != 0) --chunks;
  const int64_t chunk_rows = tm / chunks;
  const uint64_t chunk_lx = static_cast<uint64_t>(chunk_rows * tn) * es_o;
  const uint64_t chunk_dev = static_cast<uint64_t>(chunk_rows * so_m) * es_o;
  const auto store_rows = [=](emit::Builder& bld, uint32_t rd, uint32_t rl, int64_t rows, uint32_t cols) {
    bld.emit(emit::dma(hw::Op::kStore, out_type, rd, rl, outc, 0, static_cast<uint64_t>(so_m) * es_o,
                       static_cast<uint32_t>(rows), static_cast<uint32_t>(cols * es_o), true, kTagStore));
  };
  if (shared) {
    k.nest.before = [](emit::Builder& bld) { bld.emit(emit::li(kPending, kNothing)); };
    k.nest.after = [=](emit::Builder& bld) {  // the last block: all of it at once
      const emit::Builder::Label none = bld.label();
      bld.emit(emit::li(kTmp, kNothing));
      bld.branch(hw::Cond::kEq, kPending, kTmp, none);
      store_rows(bld, kPending, 0, tm, static_cast<uint32_t>(tn));
      bld.bind(none);
    };
  }
  // Shared: r[kCurA] = the byte offset of this core's block in the super-block of a tensor with
  // these row and column strides (bytes): row i = rank / gn, column j = rank % gn.
  const auto block_offset = [=](emit::Builder& bld, int64_t row_bytes, int64_t col_bytes) {
    const auto gn = static_cast<uint64_t>(grid.gn);
    bld.emit(emit::rank(kCurA));
    bld.emit(emit::divu(kSteps, kCurA, gn));
    bld.emit(emit::remu(kCurA, kCurA, gn));
    bld.emit(emit::muli(kSteps, kSteps, tm * row_bytes));
    bld.emit(emit::muli(kCurA, kCurA, tn * col_bytes));
    bld.emit(emit::add(kCurA, kCurA, kSteps));
  };
  k.body = [=](emit::Builder& bld, uint32_t tails) {
    const auto mt = static_cast<uint32_t>((tails & m_bit) ? m_tail : tm);
    const auto nt = static_cast<uint32_t>((tails & n_bit) ? n_tail : tn);
    // Loads step `s` (`kt` deep) at the cursors into its buffers: this core's own tiles, or,
    // shared, the panels this core multicasts (none when its set register is zero).
    const auto load = [&](int s, uint32_t kt) {
      const int ia = s % ta.raws, ib = s % tb.raws;
      const auto one = [&](uint32_t cur, uint32_t set, uint32_t lx, uint64_t stride, uint32_t rows, uint32_t row_bytes,
                           uint32_t tag) {
        if (!shared) {
          bld.emit(emit::dma(hw::Op::kLoad, compute, cur, 0, lx, 0, stride, rows, row_bytes, true, tag));
          return;
        }
        const emit::Builder::Label skip = bld.label();
        bld.branch(hw::Cond::kEq, set, 0, skip);
        bld.emit(emit::dma(hw::Op::kLoadMulticast, compute, cur, set, lx, 0, stride, rows, row_bytes, true, tag));
        bld.bind(skip);
      };
      if (A.transposed) {  // kt rows of mt, along K
        one(kCurA, kSetA, ta.raw[ia], static_cast<uint64_t>(A.inner) * es, kt, static_cast<uint32_t>(mt * es),
            tag_a(ia));
      } else {
        one(kCurA, kSetA, ta.raw[ia], static_cast<uint64_t>(A.outer) * es, mt, static_cast<uint32_t>(kt * es),
            tag_a(ia));
      }
      if (B.transposed) {  // nt rows of kt, along N
        one(kCurB, kSetB, tb.raw[ib], static_cast<uint64_t>(B.inner) * es, nt, static_cast<uint32_t>(kt * es),
            tag_b(ib));
      } else {
        one(kCurB, kSetB, tb.raw[ib], static_cast<uint64_t>(B.outer) * es, kt, static_cast<uint32_t>(nt * es),
            tag_b(ib));
      }
    };
    const auto advance = [&] {
      bld.emit(emit::addi(kCurA, kCurA, tk * sa_k * static_cast<int64_t>(es)));
      bld.emit(emit::addi(kCurB, kCurB, tk * sb_k * static_cast<int64_t>(es)));
    };
    const auto multiply = [&](int s, uint32_t kt) {
      const int ia = s % ta.raws, ib = s % tb.raws;
      if (!shared) bld.emit(emit::wait_tags(1u << tag_a(ia) | 1u << tag_b(ib)));  // shared: the loop waited
      uint32_t pa = ta.raw[ia], pb = tb.raw[ib];
      if (A.transposed) {
        pa = ta.transposed[s % ta.transposes];
        bld.emit(emit::sfp(hw::Op::kTranspose, compute, 0, pa, ta.raw[ia], 0, kt, mt));
      }
      if (B.transposed) {
        pb = tb.transposed[s % tb.transposes];
        bld.emit(emit::sfp(hw::Op::kTranspose, compute, 0, pb, tb.raw[ib], 0, nt, kt));
      }
      hw::Instr in = emit::instr(hw::Op::kMatmul);
      in.dtype = compute;
      in.flags = hw::kMatmulAccumulate;
      in.a = acc;
      in.b = emit::pack2(pa, pb);
      in.c = hw::pack_mkn(mt, kt, nt);
      bld.emit(in);
    };

    // The accumulator is cleared while the first step's tiles load.
    const auto clear = [&] {
      bld.emit(emit::sfp(hw::Op::kFill, DType::kF32, 0, acc, 0, emit::double_bits(0.0), mt, nt));
    };
    if (shared) {
      // Grid row i = rank / gn, column j = rank % gn. Core (i, 0) multicasts A panel i along its
      // row, core (0, j) B panel j down its column.
      const auto gm = static_cast<uint64_t>(grid.gm), gn = static_cast<uint64_t>(grid.gn);
      const emit::Builder::Label a_done = bld.label(), b_done = bld.label();
      bld.emit(emit::rank(kCurA));
      bld.emit(emit::divu(kSteps, kCurA, gn));
      bld.emit(emit::remu(kSetB, kCurA, gn));
      bld.emit(emit::muli(kSetA, kSteps, static_cast<int64_t>(gn)));
      bld.emit(emit::addi(kSetA, kSetA, static_cast<int64_t>(hw::pack_rank_set(0, 1, gn))));
      bld.branch(hw::Cond::kEq, kSetB, 0, a_done);
      bld.emit(emit::li(kSetA, 0));
      bld.bind(a_done);
      bld.emit(emit::muli(kCurA, kSteps, tm * sa_m * static_cast<int64_t>(es)));
      bld.emit(emit::add(kCurA, kCurA, operand_reg(0)));
      bld.emit(emit::muli(kCurB, kSetB, tn * sb_n * static_cast<int64_t>(es)));
      bld.emit(emit::add(kCurB, kCurB, operand_reg(1)));
      bld.emit(emit::addi(kSetB, kSetB, static_cast<int64_t>(hw::pack_rank_set(0, gn, gm))));
      bld.branch(hw::Cond::kEq, kSteps, 0, b_done);
      bld.emit(emit::li(kSetB, 0));
      bld.bind(b_done);
      // Every core is done with buffer 0 of the previous super-block before step 0 lands in it.
      bld.emit(emit::instr(hw::Op::kBarrier));
    } else {
      bld.emit(emit::addi(kCurA, operand_reg(0), 0));
      bld.emit(emit::addi(kCurB, operand_reg(1), 0));
    }
    if (full_steps > 0) {
      // `period` steps per trip; the next step loads while this one multiplies.
      const auto kt = static_cast<uint32_t>(tk);
      const emit::Builder::Label loop = bld.label(), done = bld.label();
      bld.emit(emit::li(kSteps, static_cast<uint64_t>(full_steps)));
      load(0, kt);
      clear();
      bld.bind(loop);
      for (int i = 0; i < period; ++i) {
        const emit::Builder::Label last = bld.label();
        if (shared) {
          // Each issuer waits for its panels of this step; after the barrier they are in every
          // receiver, and every core is done with the buffers the next step lands in: pipelined,
          // the previous step's MATMUL runs on through the barrier (no core writes what it reads
          // before the next one), and every older one has finished.
          bld.emit(emit::wait_tags(1u << tag_a(i % ta.raws) | 1u << tag_b(i % tb.raws)));
          bld.emit(emit::barrier(pipe ? 1 : 0));
          // Chunk S - steps of the pending block, while there is one.
          const emit::Builder::Label no_chunk = bld.label();
          bld.emit(emit::li(kTmp, kNothing));
          bld.branch(hw::Cond::kEq, kPending, kTmp, no_chunk);
          bld.emit(emit::li(kTmp, static_cast<uint64_t>(full_steps - chunks)));
          bld.branch(hw::Cond::kGeu, kTmp, kSteps, no_chunk);
          bld.emit(emit::muli(kTmp, kSteps, -static_cast<int64_t>(chunk_lx)));
          bld.emit(emit::addi(kTmp, kTmp, full_steps * static_cast<int64_t>(chunk_lx)));
          store_rows(bld, kPending, kTmp, chunk_rows, nt);
          bld.emit(emit::addi(kPending, kPending, static_cast<int64_t>(chunk_dev)));
          bld.bind(no_chunk);
        }
        bld.emit(emit::li(kTmp, 1));
        bld.branch(hw::Cond::kEq, kSteps, kTmp, last);
        advance();
        load(i + 1, kt);
        bld.bind(last);
        multiply(i, kt);
        bld.emit(emit::addi(kSteps, kSteps, -1));
        bld.branch(hw::Cond::kEq, kSteps, 0, done);
      }
      bld.jump(loop);
      bld.bind(done);
      if (k_tail > 0) advance();
    }
    if (k_tail > 0) {  // step full_steps: its buffers are free by the same rule
      const int s = static_cast<int>(full_steps % period);
      load(s, static_cast<uint32_t>(k_tail));
      if (full_steps == 0) clear();
      multiply(s, static_cast<uint32_t>(k_tail));
    }

    uint32_t bias_from = operand_reg(3);
    if (bias && shared) {
      const auto eb = static_cast<int64_t>(es_bias);
      block_offset(bld, sbias_m * eb, sbias_n * eb);
      bld.emit(emit::add(kTmp, kCurA, operand_reg(3)));
      bias_from = kTmp;
    }
    const auto residual_at = [&](emit::Builder& b) -> std::pair<uint32_t, uint64_t> {
      if (shared) {  // the K loop is done: the cursors are free
        block_offset(b, so_m * static_cast<int64_t>(es_o), so_n * static_cast<int64_t>(es_o));
        b.emit(emit::add(kCurA, kCurA, operand_reg(2)));
      } else {
        b.emit(emit::addi(kCurA, operand_reg(2), 0));
      }
      emit_residual_address(b, problem, kCurA, kCurB);
      return {kCurA, 0};
    };
    emit_matmul_epilogue(bld, problem, {acc, braw, bf32, outc, res}, mt, nt, bias_from, 0, residual_at);
    const uint32_t dst = operand_reg(2);
    if (shared) {
      block_offset(bld, so_m * static_cast<int64_t>(es_o), so_n * static_cast<int64_t>(es_o));
      bld.emit(emit::add(kPending, kCurA, dst));  // stored during the next super-block's steps
      return;
    }
    store_rows(bld, dst, 0, mt, nt);
  };
  return k;
}

}  // namespace spyre::compiler::lower
