#include "latency.h"

#include <algorithm>

namespace spyre::sim::latency {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

// Elements of type t one cycle of the SFP's lanes holds: sfp_lanes 16-bit lanes, so 32-bit types
// at half the rate and 64-bit at a quarter (bool and bytes as 16-bit).
uint64_t per_cycle(const ChipConfig& c, hw::DType t) {
  const uint64_t bytes = std::max<uint32_t>(hw::dtype_size(t), 2);
  return std::max<uint64_t>(uint64_t{c.sfp_lanes} * 2 / bytes, 1);
}

}  // namespace

uint64_t matmul(const ChipConfig& c, uint32_t m, uint32_t k, uint32_t n, hw::DType t) {
  // Partial tiles cost whole ones; K pads to the lanes.
  const uint64_t rows = c.pt_rows, cols = uint64_t{c.pt_cols} * c.corelets_per_core;
  const uint64_t tiles = ceil_div(m, rows) * ceil_div(n, cols);
  const uint64_t k_padded = ceil_div(k, c.pt_simd) * c.pt_simd;
  const double rate = t == hw::DType::kF32 ? c.fp32_rate : 1.0;
  const auto compute = static_cast<uint64_t>(static_cast<double>(tiles * (k_padded / c.pt_simd)) / rate + 0.999999);
  const uint64_t feed = ceil_div(tiles * (rows + cols) * k_padded * hw::dtype_size(t), c.lx_read_bytes_per_cycle);
  return std::max(compute, feed) + tiles * c.pt_tile_cycles + c.pt_fill_cycles + c.pt_drain_cycles;
}

uint64_t sfp_elements(const ChipConfig& c, uint64_t elements, hw::DType width, uint32_t per_group) {
  return ceil_div(elements, per_cycle(c, width)) * per_group + c.sfp_fill_cycles;
}

uint64_t sort_network(const ChipConfig& c, uint64_t rows, uint64_t cols, hw::DType t) {
  uint64_t p = 1, lg = 0;
  while (p < cols) {
    p <<= 1;
    ++lg;
  }
  const uint64_t stages = std::max<uint64_t>(lg * (lg + 1) / 2, 1);  // values and indices each pass
  return stages * ceil_div(rows * p, per_cycle(c, t)) + c.sfp_fill_cycles;
}

uint64_t sfp(const ChipConfig& c, const hw::Instr& in, uint64_t rows, uint64_t cols) {
  const uint64_t n = rows * cols;
  hw::DType width = in.dtype;
  uint32_t per_group = 1;
  switch (in.op) {
    case hw::Op::kConvert: {
      const auto from = static_cast<hw::DType>(in.c);
      if (hw::dtype_size(from) > hw::dtype_size(in.dtype)) width = from;
      per_group = c.sfp_convert_cycles;
      break;
    }
    case hw::Op::kUnary:
      if (unary_is_transcendental(static_cast<hw::UnaryFn>(in.c))) per_group = c.sfp_transcendental_cycles;
      break;
    case hw::Op::kBinary:
      if (binary_is_transcendental(static_cast<hw::BinaryFn>(in.c & 0xff))) per_group = c.sfp_transcendental_cycles;
      break;
    case hw::Op::kReduce:
    case hw::Op::kScan:
      per_group = c.sfp_reduce_cycles;
      break;
    case hw::Op::kRandom:
      per_group = c.sfp_transcendental_cycles;
      break;
    case hw::Op::kSort:
      return sort_network(c, rows, cols, in.dtype);
    default:  // select, fma, fill, iota, transpose: one cycle per group
      break;
  }
  return sfp_elements(c, n, width, per_group);
}

bool unary_is_transcendental(hw::UnaryFn f) {
  return f >= hw::UnaryFn::kExp && f <= hw::UnaryFn::kCos;
}

bool binary_is_transcendental(hw::BinaryFn f) {
  return f == hw::BinaryFn::kDiv || f == hw::BinaryFn::kPow || f == hw::BinaryFn::kAtan2 ||
         f == hw::BinaryFn::kRemainder || f == hw::BinaryFn::kFmod || f == hw::BinaryFn::kFloorDiv;
}

}  // namespace spyre::sim::latency
