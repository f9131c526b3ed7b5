// Testbench of the indirect DMA instructions of an AI core (tile ISA v2), GATHER and SCATTER,
// each result checked against something the model does not compute:
// - the rows moved, against a table and index vector written here and the layout in
//   spyre/hw/isa.h (row i of the table at r[rd] + b + i * stride, d rows of e bytes packed in the
//   scratchpad at a, int64 indices at scratchpad c[63:32]);
// - SCATTER with kScatterAdd and kScatterMul against the same arithmetic done here in double,
//   rounded once per element and step as IEEE 754 says (core_harness.h), in index order;
// - faults against the instruction that must fault, with device memory compared byte for byte;
// - timing against the ring bandwidth in the config, and asynchronous transfers against WAIT.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core_harness.h"

using namespace spyre;
using namespace spyre::tb;
using hw::DType;
using hw::Op;

namespace {

constexpr uint64_t kTable = 0x4000000;  // device address of the table
constexpr uint32_t kTableReg = 3, kBoundReg = 4;

/// GATHER or SCATTER (op) of `rows` rows of `row_bytes` bytes packed at scratchpad `lx`, with their
/// int64 indices at scratchpad `idx`: index i names the table row at r[kTableReg] + offset + i * stride
/// and must be in [0, r[kBoundReg]).
hw::Instr indirect(Op op, DType t, uint64_t offset, uint32_t stride, uint32_t lx, uint32_t idx, uint32_t rows,
                   uint32_t row_bytes, uint8_t flags = 0) {
  hw::Instr i = emit::instr(op);
  i.dtype = t;
  i.regs = hw::pack_regs(kTableReg, kBoundReg);
  i.flags = flags;
  i.a = lx;
  i.b = offset;
  i.c = uint64_t{stride} | uint64_t{idx} << 32;
  i.d = rows;
  i.e = row_bytes;
  return i;
}
/// Points the table register at kTable and sets the bound to `rows`.
std::vector<hw::Instr> table_regs(uint64_t rows) {
  return {emit::li(kTableReg, kTable), emit::li(kBoundReg, rows)};
}
/// The bytes of an int64 index vector.
std::vector<uint8_t> index_bytes(const std::vector<int64_t>& idx) {
  std::vector<uint8_t> b(idx.size() * 8);
  std::memcpy(b.data(), idx.data(), b.size());
  return b;
}
/// n bytes that differ from their neighbours and from another seed's.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t k = 0; k < n; ++k) b[k] = static_cast<uint8_t>(k * 29 + k / 251 + seed * 71 + 5);
  return b;
}
std::vector<uint8_t> read_table(uint64_t n) {
  std::vector<uint8_t> b(n);
  h->memory.read(kTable, b.data(), n);
  return b;
}

}  // namespace

TEST_CASE("GATHER copies the rows an index vector names, at a row stride and offset, repeats included") {
  const uint32_t rows = 10, stride = 96, offset = 8, row_bytes = 40;
  const std::vector<int64_t> idx = {3, 0, 9, 3, 3, 7, 1, 9};
  const auto n = static_cast<uint32_t>(idx.size());
  const std::vector<uint8_t> table = pattern(offset + rows * stride, 1);
  h->memory.write(kTable, table.data(), table.size());
  std::vector<hw::Instr> code = table_regs(rows);
  code.push_back(indirect(Op::kGather, DType::kI8, offset, stride, kD, kZ, n, row_bytes));
  const auto got = on_core({{kZ, index_bytes(idx)}}, code, {{kD, n * row_bytes}});
  std::vector<uint8_t> want;
  for (int64_t i : idx) {
    const auto row = table.begin() + static_cast<std::ptrdiff_t>(offset + i * stride);
    want.insert(want.end(), row, row + row_bytes);
  }
  CHECK(got[0] == want);
  CHECK(read_table(table.size()) == table);  // a gather only reads
}

TEST_CASE("SCATTER overwrites the rows an index vector names and no other byte") {
  const uint32_t rows = 12, stride = 80, offset = 16, row_bytes = 48;
  const uint64_t span = offset + rows * stride + 64;
  const std::vector<uint8_t> table = pattern(span, 2);
  for (const std::vector<int64_t>& idx : {std::vector<int64_t>{4, 11, 0, 7}, std::vector<int64_t>{2, 5, 2}}) {
    CAPTURE(idx.size());
    const auto n = static_cast<uint32_t>(idx.size());
    h->memory.write(kTable, table.data(), table.size());
    const std::vector<uint8_t> src = pattern(n * row_bytes, 3);
    std::vector<hw::Instr> code = table_regs(rows);
    code.push_back(indirect(Op::kScatter, DType::kI8, offset, stride, kD, kZ, n, row_bytes));
    on_core({{kZ, index_bytes(idx)}, {kD, src}}, code, {});
    const std::vector<uint8_t> got = read_table(span);
    std::vector<uint8_t> want = table;
    for (uint32_t j = 0; j < n; ++j) {
      std::copy_n(src.begin() + j * row_bytes, row_bytes,
                  want.begin() + static_cast<std::ptrdiff_t>(offset + idx[j] * stride));
    }
    if (n == 3) {
      // A row named twice holds one of the rows written to it.
      const auto at = got.begin() + offset + 2 * stride;
      const bool first = std::equal(at, at + row_bytes, src.begin());
      const bool last = std::equal(at, at + row_bytes, src.begin() + 2 * row_bytes);
      CHECK((first || last));
      std::copy(at, at + row_bytes, want.begin() + offset + 2 * stride);
    }
    CHECK(got == want);
  }
}

TEST_CASE(
    "SCATTER with kScatterAdd, kScatterMul, kScatterMax and kScatterMin: f32, f16 rounded once per element, i32 "
    "wrapping, bool or/and") {
  const uint32_t rows = 6, cols = 5;
  const std::vector<int64_t> idx = {5, 2, 5, 0, 5, 3, 2};  // rows 1 and 4 untouched, 5 three times
  const auto n = static_cast<uint32_t>(idx.size());
  for (const DType t : {DType::kF32, DType::kF16, DType::kI32, DType::kBool}) {
    for (const uint8_t fn : {hw::kScatterAdd, hw::kScatterMul, hw::kScatterMax, hw::kScatterMin}) {
      for (const bool async : {false, true}) {
        const bool max = fn == hw::kScatterMax, min = fn == hw::kScatterMin;
        const bool add = fn == hw::kScatterAdd || max || min;  // max and min take add's values
        CAPTURE(std::string(hw::dtype_name(t)));
        CAPTURE(add);
        CAPTURE(async);
        const uint32_t es = hw::dtype_size(t), stride = (cols + 3) * es;  // padding between rows stays
        // Element 0 of each float row adds half an ulp of 1 to 1, a tie that rounds back to 1 at
        // each step: accumulating row 5's three before rounding would not (multiplying: by 1 + ulp).
        const double half_ulp = t == DType::kF16 ? std::ldexp(1, -11) : std::ldexp(1, -24);
        std::vector<double> table(rows * cols), src(n * cols);
        for (uint32_t r = 0; r < rows; ++r) {
          for (uint32_t c = 0; c < cols; ++c) {
            const double v = t == DType::kBool  ? (r + c) % 2
                             : t == DType::kI32 ? (c == 1   ? INT32_MAX - 3
                                                   : c == 2 ? 65536
                                                            : 1000.0 * r - 77.0 * c)
                             : c == 0           ? 1
                             : add              ? 0.5 + 0.3 * r - 0.17 * c
                                                : 1 + 0.1 * r - 0.05 * c;
            table[r * cols + c] = v;
          }
        }
        for (uint32_t j = 0; j < n; ++j) {
          for (uint32_t c = 0; c < cols; ++c) {
            const double v = t == DType::kBool  ? (j * 3 + c) % 3 == 0
                             : t == DType::kI32 ? (c == 1   ? 5
                                                   : c == 2 ? 65536
                                                            : 1000.0 * j - 3001 + c)
                             : c == 0           ? (add ? half_ulp : 1 + 2 * half_ulp)
                             : add              ? (j * 7 % 11 - 5.0) * 0.37 + 0.01 * c
                                                : 0.75 + 0.125 * (j % 5) + 0.03 * c;
            src[j * cols + c] = v;
          }
        }
        // The table in device memory: rows `stride` apart, padding bytes from a pattern.
        std::vector<uint8_t> bytes = pattern(rows * stride, 4);
        const std::vector<uint8_t> packed = pack(t, table);
        for (uint32_t r = 0; r < rows; ++r)
          std::copy_n(packed.begin() + r * cols * es, cols * es, bytes.begin() + r * stride);
        h->memory.write(kTable, bytes.data(), bytes.size());
        // The golden: in index order, each element combined and rounded to t (or wrapped).
        std::vector<double> want = unpack(t, packed);
        const std::vector<double> rows_in = unpack(t, pack(t, src));
        for (uint32_t j = 0; j < n; ++j) {
          for (uint32_t c = 0; c < cols; ++c) {
            double& w = want[idx[j] * cols + c];
            const double x = rows_in[j * cols + c];
            if (max || min) {
              w = max ? std::max(w, x) : std::min(w, x);  // bool: or and and
            } else if (t == DType::kBool) {
              w = add ? (w != 0 || x != 0) : (w != 0 && x != 0);
            } else if (t == DType::kI32) {
              const auto a = static_cast<int64_t>(w), b = static_cast<int64_t>(x);
              w = static_cast<double>(wrap(t, add ? a + b : a * b));
            } else {
              w = round_to(t, add ? w + x : w * x);
            }
          }
        }
        std::vector<hw::Instr> code = table_regs(rows);
        code.push_back(indirect(Op::kScatter, t, 0, stride, kD, kZ, n, cols * es,
                                static_cast<uint8_t>(fn | hw::dma_flags(async, 9))));
        if (async) code.push_back(emit::wait_tags(1u << 9));
        on_core({{kZ, index_bytes(idx)}, {kD, pack(t, src)}}, code, {});
        const std::vector<uint8_t> got = read_table(bytes.size());
        std::vector<uint8_t> want_bytes = bytes;
        const std::vector<uint8_t> want_packed = pack(t, want);
        for (uint32_t r = 0; r < rows; ++r) {
          std::copy_n(want_packed.begin() + r * cols * es, cols * es, want_bytes.begin() + r * stride);
        }
        int failures = 0;
        for (uint32_t r = 0; r < rows; ++r) {
          const std::vector<uint8_t> row(got.begin() + r * stride, got.begin() + r * stride + cols * es);
          for (uint32_t c = 0; c < cols; ++c) {
            expect(get(t, row, c) == want[r * cols + c], failures,
                   cat("row ", r, " element ", c, ": want ", want[r * cols + c], " got ", get(t, row, c)));
          }
        }
        CHECK(failures == 0);
        CHECK(got == want_bytes);  // padding included
      }
    }
  }
}

TEST_CASE("an index outside [0, r[rb]) faults at the instruction before any byte moves") {
  const uint32_t rows = 8, stride = 32, row_bytes = 32, lx = static_cast<uint32_t>(h->config.chip.lx_bytes);
  const std::vector<uint8_t> table = pattern(rows * stride + 64, 5), sentinel(4 * row_bytes, 0x3c);
  const struct {
    const char* what;
    Op op;
    uint8_t flags;
    std::vector<int64_t> idx;
    uint32_t rows_at = kD, idx_at = kZ;
    DType t = DType::kF32;
    uint32_t bytes = row_bytes;
  } cases[] = {
      {"SCATTER, index == bound after good ones", Op::kScatter, 0, {1, 0, 8}},
      {"SCATTER, index -1", Op::kScatter, 0, {2, -1, 3}},
      {"SCATTER-ADD, index INT64_MIN", Op::kScatter, hw::kScatterAdd, {0, 1, INT64_MIN}},
      {"SCATTER-MUL, index bound + 5", Op::kScatter, hw::kScatterMul, {3, 13}},
      {"async SCATTER-ADD, index -2", Op::kScatter, hw::kScatterAdd | hw::dma_flags(true, 2), {4, -2}},
      {"GATHER, index == bound", Op::kGather, 0, {7, 8}},
      {"GATHER, index -1", Op::kGather, 0, {-1}},
      {"GATHER with the scatter-add flag", Op::kGather, hw::kScatterAdd, {0, 1}},
      {"GATHER rows past the scratchpad", Op::kGather, 0, {0, 1}, lx - row_bytes},
      {"SCATTER index vector past the scratchpad", Op::kScatter, 0, {0, 1}, kD, lx - 8},
      {"SCATTER with both add and multiply", Op::kScatter, hw::kScatterAdd | hw::kScatterMul, {0, 1}},
      {"SCATTER with both add and max", Op::kScatter, hw::kScatterAdd | hw::kScatterMax, {0, 1}},
      {"SCATTER with add, multiply and max", Op::kScatter, hw::kScatterAdd | hw::kScatterMin, {0, 1}},
      {"SCATTER-MAX with an invalid dtype", Op::kScatter, hw::kScatterMax, {0, 1}, kD, kZ, DType::kCount},
      {"SCATTER-ADD rows not a whole number of f32", Op::kScatter, hw::kScatterAdd, {0, 1}, kD, kZ, DType::kF32, 30},
      {"SCATTER-MUL with an invalid dtype", Op::kScatter, hw::kScatterMul, {0, 1}, kD, kZ, DType::kCount},
  };
  for (const auto& k : cases) {
    CAPTURE(k.what);
    const auto n = static_cast<uint32_t>(k.idx.size());
    h->memory.write(kTable, table.data(), table.size());
    h->memory.write(kOut, sentinel.data(), sentinel.size());
    const std::vector<uint8_t> idx = index_bytes(k.idx), src = pattern(n * row_bytes, 6);
    h->memory.write(kIn, idx.data(), idx.size());
    h->memory.write(kIn + 0x1000, src.data(), src.size());
    std::vector<hw::Instr> code = {
        emit::arg(1, 0), emit::arg(2, 1), emit::dma(Op::kLoad, hw::DType::kI64, 1, 0, kZ, 0, 0, 1, n * 8, false, 0),
        emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, kD, 0x1000, 0, 1, n * row_bytes, false, 0)};
    const std::vector<hw::Instr> regs = table_regs(rows);
    code.insert(code.end(), regs.begin(), regs.end());
    const auto at = static_cast<uint32_t>(code.size());
    code.push_back(indirect(k.op, k.t, 0, stride, k.rows_at, k.idx_at, n, k.bytes, k.flags));
    code.push_back(emit::wait_tags(0xffff));
    code.push_back(emit::dma(Op::kStore, hw::DType::kF32, 2, 0, kD, 0, 0, 1, n * row_bytes, false, 0));  // must not run
    h->run(compiler::assemble("fault", {code}, 2));
    CHECK(h->cores[0]->result().error == hw::ErrorCode::kCoreFault);
    CHECK(h->cores[0]->result().detail == at);  // core 0, the GATHER or SCATTER
    CHECK(read_table(table.size()) == table);
    std::vector<uint8_t> out(sentinel.size());
    h->memory.read(kOut, out.data(), out.size());
    CHECK(out == sentinel);
  }
}

TEST_CASE("a SCATTER row outside device memory faults before any row moves") {
  const uint64_t end = h->memory.size(), base = end - 64;
  const uint32_t row_bytes = 32;
  const std::vector<uint8_t> before(64, 0x11), src = pattern(2 * row_bytes, 8);
  h->memory.write(base, before.data(), before.size());
  const std::vector<uint8_t> idx = index_bytes({0, 1});  // rows at end - 64 (inside) and at end (outside)
  h->memory.write(kIn, idx.data(), idx.size());
  h->memory.write(kIn + 0x1000, src.data(), src.size());
  const std::vector<hw::Instr> code = {
      emit::arg(1, 0),
      emit::dma(Op::kLoad, hw::DType::kI64, 1, 0, kZ, 0, 0, 1, 16, false, 0),
      emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, kD, 0x1000, 0, 1, 2 * row_bytes, false, 0),
      emit::li(kTableReg, base),
      emit::li(kBoundReg, 2),
      indirect(Op::kScatter, DType::kF32, 0, 64, kD, kZ, 2, row_bytes)};
  h->run(compiler::assemble("edge", {code}, 2));
  CHECK(h->cores[0]->result().error == hw::ErrorCode::kCoreFault);
  CHECK(h->cores[0]->result().detail == code.size() - 1);
  std::vector<uint8_t> got(64);
  h->memory.read(base, got.data(), got.size());
  CHECK(got == before);
}

namespace {
/// Runs, on core 0, the int64 indices `idx` loaded at kIdx, the table registers (bound `rows`),
/// then `pre`, four exp blocks if `with_compute`, then `post`; the cycles until the core stopped.
double indexed_program(const std::vector<int64_t>& idx, uint64_t rows, const std::vector<hw::Instr>& pre,
                       bool with_compute, const std::vector<hw::Instr>& post) {
  const std::vector<uint8_t> bytes = index_bytes(idx);
  h->memory.write(kIn, bytes.data(), bytes.size());
  std::vector<hw::Instr> code = {emit::arg(1, 0), emit::dma(Op::kLoad, hw::DType::kI64, 1, 0, kIdx, 0, 0, 1,
                                                            static_cast<uint32_t>(bytes.size()), false, 0)};
  const std::vector<hw::Instr> regs = table_regs(rows);
  code.insert(code.end(), regs.begin(), regs.end());
  code.insert(code.end(), pre.begin(), pre.end());
  if (with_compute) code.insert(code.end(), 4, exp_block());
  code.insert(code.end(), post.begin(), post.end());
  const double cycles = h->run(compiler::assemble("indexed", {code}, 2));
  CHECK(h->cores[0]->result().ok());
  return cycles;
}
}  // namespace

TEST_CASE("an async GATHER lands by the WAIT on its tag and overlaps SFP work") {
  // 512 rows of 512 bytes: 1920 cycles of LPDDR5 bandwidth at least; four exp blocks: 4 x 522 cycles.
  const uint32_t rows = 512, row_bytes = 512;
  std::vector<int64_t> idx(rows);
  for (uint32_t j = 0; j < rows; ++j) idx[j] = (j * 7 + j / 3) % rows;  // repeats, and rows never named
  const std::vector<uint8_t> table = pattern(uint64_t{rows} * row_bytes, 7);
  h->memory.write(kTable, table.data(), table.size());
  const hw::Instr sync_gather = indirect(Op::kGather, DType::kI8, 0, row_bytes, kE, kIdx, rows, row_bytes);
  hw::Instr async_gather = sync_gather;
  async_gather.flags = hw::dma_flags(true, 6);
  const double base = indexed_program(idx, rows, {}, false, {});
  const double gather = indexed_program(idx, rows, {sync_gather}, false, {}) - base;
  const double work = indexed_program(idx, rows, {}, true, {}) - base;
  const double serial = indexed_program(idx, rows, {sync_gather}, true, {}) - base;
  const double overlapped = indexed_program(idx, rows, {async_gather}, true, {emit::wait_tags(1u << 6)}) - base;
  CAPTURE(gather);
  CAPTURE(work);
  CAPTURE(serial);
  CAPTURE(overlapped);
  const double issue = h->config.chip.issue_cycles;
  CHECK(gather >= double{rows} * row_bytes / (h->config.memory.bandwidth_gbps * 1000 / h->config.chip.clock_mhz));
  CHECK(serial + 1 >= gather + work);
  CHECK(overlapped + 1 >= gather);  // the WAIT cannot return before the rows have landed
  CHECK(near(overlapped, std::max(gather, issue + work + issue), 2));
  CHECK(overlapped + work / 2 < serial);
  // The rows are there after the WAIT.
  indexed_program(idx, rows, {async_gather}, true,
                  {emit::wait_tags(1u << 6), emit::arg(2, 1),
                   emit::dma(Op::kStore, hw::DType::kF32, 2, 0, kE, 0, 0, 1, rows * row_bytes, false, 0)});
  std::vector<uint8_t> got(uint64_t{rows} * row_bytes), want;
  h->memory.read(kOut, got.data(), got.size());
  for (int64_t i : idx) want.insert(want.end(), table.begin() + i * row_bytes, table.begin() + (i + 1) * row_bytes);
  CHECK(got == want);
}

TEST_CASE("GATHER and SCATTER of R rows of B bytes take at least R * B / LPDDR5 bytes per cycle; adding costs more") {
  const sim::Config& c = h->config;
  const double issue = c.chip.issue_cycles;
  // LPDDR5 in bytes and cycles: GB/s are bytes per ns.
  const double memory_per_cycle = c.memory.bandwidth_gbps * 1000 / c.chip.clock_mhz;
  const double memory_latency = c.memory.latency_ns * c.chip.clock_mhz / 1000.0;
  for (const auto& [rows, row_bytes] : {std::pair{64u, 256u}, std::pair{512u, 128u}, std::pair{16u, 4096u}}) {
    CAPTURE(rows);
    CAPTURE(row_bytes);
    std::vector<int64_t> idx(rows);
    for (uint32_t j = 0; j < rows; ++j) idx[j] = rows - 1 - j;
    const std::vector<uint8_t> zeros(uint64_t{rows} * row_bytes, 0);
    h->memory.write(kTable, zeros.data(), zeros.size());
    const auto op = [&](Op o, uint8_t flags) {
      return indirect(o, DType::kF32, 0, row_bytes, kD, kIdx, rows, row_bytes, flags);
    };
    const double base = indexed_program(idx, rows, {}, false, {});
    const uint64_t loaded = h->stats[0].bytes_loaded, stored = h->stats[0].bytes_stored;
    const double gather = indexed_program(idx, rows, {op(Op::kGather, 0)}, false, {}) - base;
    CHECK(h->stats[0].bytes_loaded - loaded == rows * 8ull + uint64_t{rows} * row_bytes);  // indices and rows
    const double scatter = indexed_program(idx, rows, {op(Op::kScatter, 0)}, false, {}) - base;
    CHECK(h->stats[0].bytes_stored - stored == uint64_t{rows} * row_bytes);
    const double scatter_add = indexed_program(idx, rows, {op(Op::kScatter, hw::kScatterAdd)}, false, {}) - base;
    const double scatter_mul = indexed_program(idx, rows, {op(Op::kScatter, hw::kScatterMul)}, false, {}) - base;
    CAPTURE(gather);
    CAPTURE(scatter);
    CAPTURE(scatter_add);
    CAPTURE(scatter_mul);
    const double bound = rows * row_bytes / memory_per_cycle;
    CHECK(gather >= bound);
    CHECK(scatter >= bound);
    CHECK(scatter_add >= scatter);
    CHECK(scatter_mul >= scatter);
    // As docs/hardware-interface.md times a LOAD or STORE of the same bytes: issued, then the
    // memory (latency once, rows back to back on all channels: the rows of consecutive indices
    // cover every channel evenly, and two ring links into the core carry more than LPDDR5 gives),
    // then at most half the ring's stops of hops.
    const double bytes = static_cast<double>(rows) * row_bytes;
    const double as_dma = issue + memory_latency + bytes / memory_per_cycle;
    const double stops = 1 + c.chip.cores + c.memory.controllers;
    CAPTURE(as_dma);
    CHECK(gather >= as_dma - 1);
    CHECK(gather <= as_dma + stops / 2 * c.ring.hop_cycles + 1);
    CHECK(scatter >= as_dma - 1);
    CHECK(scatter <= as_dma + stops / 2 * c.ring.hop_cycles + 1);
    // Accumulating: every byte read from and written to LPDDR5, so twice the bytes of memory
    // bandwidth, after at least one memory latency.
    const double accumulating = issue + 2 * bytes / memory_per_cycle + memory_latency;
    CAPTURE(accumulating);
    CHECK(scatter_add >= accumulating);
    CHECK(scatter_mul >= accumulating);
  }
}

extern "C" int sc_main(int argc, char* argv[]) {
  Harness harness;
  h = &harness;
  doctest::Context context(argc, argv);
  return context.run();
}
