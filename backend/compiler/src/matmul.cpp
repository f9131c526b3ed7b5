#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "emit/builder.h"
#include "spyre/compiler/program.h"

namespace spyre::compiler {
namespace {

constexpr uint32_t kTileM = 128;
constexpr uint32_t kTileN = 128;
constexpr uint32_t kTileK = 256;
constexpr uint32_t kLxAlign = 128;  // one stick

uint64_t align(uint64_t v) {
  return (v + kLxAlign - 1) / kLxAlign * kLxAlign;
}

// The operand's device address lives in register 1 + its argument slot (see the prologue).
hw::Instr load_store(hw::Op op, uint8_t arg, uint32_t lx, uint64_t offset, uint64_t stride, uint32_t rows,
                     uint32_t row_bytes) {
  return emit::dma(op, 1u + arg, 0, lx, offset, stride, rows, row_bytes, false, 0);
}

}  // namespace

Program compile_matmul(const MatmulSpec& s, const Target& t) {
  if (s.m == 0 || s.k == 0 || s.n == 0) {
    throw std::invalid_argument(fmt::format("compile_matmul: empty shape {}x{}x{}", s.m, s.k, s.n));
  }
  if (s.lda < s.k || s.ldb < s.n || s.ldc < s.n) {
    throw std::invalid_argument(fmt::format("compile_matmul: row strides lda={} ldb={} ldc={} too small for {}x{}x{}",
                                            s.lda, s.ldb, s.ldc, s.m, s.k, s.n));
  }
  if (s.in >= hw::DType::kCount || s.out >= hw::DType::kCount) throw std::invalid_argument("compile_matmul: dtype");
  const uint64_t es_in = hw::dtype_size(s.in);
  const uint64_t es_out = hw::dtype_size(s.out);
  const uint32_t tm = std::min(s.m, kTileM), tn = std::min(s.n, kTileN), tk = std::min(s.k, kTileK);

  // Scratchpad layout: A tile, B tile, fp32 accumulator, narrowed output.
  const uint32_t lx_a = 0;
  const uint32_t lx_b = static_cast<uint32_t>(align(lx_a + uint64_t{tm} * tk * es_in));
  const uint32_t lx_c = static_cast<uint32_t>(align(lx_b + uint64_t{tk} * tn * es_in));
  const uint32_t lx_o = static_cast<uint32_t>(align(lx_c + uint64_t{tm} * tn * 4));
  const uint64_t lx_end = lx_o + uint64_t{tm} * tn * es_out;
  if (lx_end > t.lx_bytes) {
    throw std::invalid_argument(
        fmt::format("compile_matmul: tiles need {} bytes of scratchpad, the core has {}", lx_end, t.lx_bytes));
  }

  const uint32_t tiles_m = (s.m + tm - 1) / tm, tiles_n = (s.n + tn - 1) / tn;
  const uint64_t tiles = uint64_t{tiles_m} * tiles_n;
  const uint32_t cores = static_cast<uint32_t>(std::min<uint64_t>(std::max<uint32_t>(t.cores, 1), tiles));
  std::vector<std::vector<hw::Instr>> streams(cores);
  for (auto& code : streams) {
    for (uint32_t slot = 0; slot < 3; ++slot) code.push_back(emit::arg(1 + slot, slot));
  }
  for (uint64_t tile = 0; tile < tiles; ++tile) {
    auto& code = streams[tile % cores];  // round robin over the cores
    const uint32_t i0 = static_cast<uint32_t>(tile / tiles_n) * tm, j0 = static_cast<uint32_t>(tile % tiles_n) * tn;
    const uint32_t mt = std::min(tm, s.m - i0), nt = std::min(tn, s.n - j0);
    for (uint32_t k0 = 0; k0 < s.k; k0 += tk) {
      const uint32_t kt = std::min(tk, s.k - k0);
      code.push_back(load_store(hw::Op::kLoad, 0, lx_a, (uint64_t{i0} * s.lda + k0) * es_in, s.lda * es_in, mt,
                                static_cast<uint32_t>(kt * es_in)));
      code.push_back(load_store(hw::Op::kLoad, 1, lx_b, (uint64_t{k0} * s.ldb + j0) * es_in, s.ldb * es_in, kt,
                                static_cast<uint32_t>(nt * es_in)));
      hw::Instr mm{};
      mm.op = hw::Op::kMatmul;
      mm.dtype = s.in;
      mm.flags = k0 == 0 ? 0 : hw::kMatmulAccumulate;
      mm.a = lx_c;
      mm.b = lx_a | uint64_t{lx_b} << 32;
      mm.c = hw::pack_mkn(mt, kt, nt);
      code.push_back(mm);
    }
    uint32_t result = lx_c;
    if (s.out != hw::DType::kF32) {
      hw::Instr cv{};
      cv.op = hw::Op::kConvert;
      cv.dtype = s.out;
      cv.a = lx_o;
      cv.b = lx_c;
      cv.c = static_cast<uint64_t>(hw::DType::kF32);
      cv.d = 1;
      cv.e = mt * nt;
      code.push_back(cv);
      result = lx_o;
    }
    code.push_back(load_store(hw::Op::kStore, 2, result, (uint64_t{i0} * s.ldc + j0) * es_out, s.ldc * es_out, mt,
                              static_cast<uint32_t>(nt * es_out)));
  }
  const char* type = hw::dtype_name(s.in);
  return assemble(fmt::format("mm {} {}x{}x{}", type, s.m, s.k, s.n), streams, 3);
}

}  // namespace spyre::compiler
