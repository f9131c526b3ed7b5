// The latency formulas against hand calculations from the chip's figures (docs/architect-guide.md,
// "The timing model"): the default card is 32 cores x 2 corelets x an 8x8 PT array x 8 fp16 lanes
// (1,024 multiply-adds per cycle per core), 64 SFP 16-bit lanes, 24 fill and 8 drain cycles.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "latency.h"

using namespace spyre;
namespace latency = spyre::sim::latency;
using hw::DType;

namespace {

hw::Instr sfp_instr(hw::Op op, DType t, uint64_t c = 0) {
  hw::Instr in{};
  in.op = op;
  in.dtype = t;
  in.c = c;
  return in;
}

}  // namespace

TEST_CASE("a matmul takes its multiply-adds at the array's rate, plus fill and drain") {
  const sim::ChipConfig c;
  // 256^3 = 16,777,216 multiply-adds at 1,024 per cycle = 16,384 cycles; + 24 + 8.
  CHECK(latency::matmul(c, 256, 256, 256, DType::kF16) == 16384 + 32);
  // fp32 at a quarter of the rate.
  CHECK(latency::matmul(c, 256, 256, 256, DType::kF32) == 4 * 16384 + 32);
  // Partial tiles cost whole ones: 9 rows are two 8-row tiles, 17 columns two 16-column tiles,
  // K = 3 pads to the 8 lanes: 4 tiles x 1 step.
  CHECK(latency::matmul(c, 9, 3, 17, DType::kF16) == 4 + 32);
}

TEST_CASE("a matmul the scratchpad port cannot feed waits for the port") {
  sim::ChipConfig c;
  c.lx_read_bytes_per_cycle = 64;
  // Each of the 32 x 16 = 512 tiles reads (8 + 16) x 256 fp16 elements: 512 x 24 x 256 x 2 bytes
  // = 6,291,456 bytes at 64 per cycle = 98,304 cycles, more than its 16,384 of compute.
  CHECK(latency::matmul(c, 256, 256, 256, DType::kF16) == 98304 + 32);
  c.pt_tile_cycles = 3;  // and a cost per output tile on top
  CHECK(latency::matmul(c, 256, 256, 256, DType::kF16) == 98304 + 512 * 3 + 32);
}

TEST_CASE("a bigger array takes fewer cycles for the same matmul, until the port binds") {
  sim::ChipConfig c;
  c.pt_rows = 16;
  c.pt_cols = 16;
  // 16 x 32 output tiles: 16 x 8 = 128 tiles, each 32 steps of 8 lanes = 4,096 cycles of compute;
  // but each tile reads (16 + 32) x 256 fp16 through the 512-byte port: 128 x 48 x 512 / 512 = 6,144.
  CHECK(latency::matmul(c, 256, 256, 256, DType::kF16) == 6144 + 32);
  c.lx_read_bytes_per_cycle = 1024;  // a port twice as wide: the array's compute binds again
  CHECK(latency::matmul(c, 256, 256, 256, DType::kF16) == 4096 + 32);
}

TEST_CASE("the SFP takes its lane groups at its class's cycles") {
  const sim::ChipConfig c;
  // 1,000 fp32 elements: 32 per cycle (64 16-bit lanes) -> 32 groups, + 8 fill.
  CHECK(latency::sfp(c, sfp_instr(hw::Op::kBinary, DType::kF32, static_cast<uint64_t>(hw::BinaryFn::kAdd)), 10, 100) ==
        32 + 8);
  // exp of 1,000 fp16: 64 per cycle -> 16 groups x 4 transcendental cycles, + 8.
  CHECK(latency::sfp(c, sfp_instr(hw::Op::kUnary, DType::kF16, static_cast<uint64_t>(hw::UnaryFn::kExp)), 1, 1000) ==
        16 * 4 + 8);
  // A division is in the slow class too.
  CHECK(latency::sfp(c, sfp_instr(hw::Op::kBinary, DType::kF16, static_cast<uint64_t>(hw::BinaryFn::kDiv)), 1, 64) ==
        4 + 8);
  // Converting fp32 to fp16 goes at the wider type's rate: 1,000 / 32 -> 32 groups.
  CHECK(latency::sfp(c, sfp_instr(hw::Op::kConvert, DType::kF16, static_cast<uint64_t>(DType::kF32)), 1, 1000) ==
        32 + 8);
  // A row reduction of 4 x 100 int64: 16 per cycle -> 25 groups at sfp_reduce_cycles (1).
  CHECK(latency::sfp(c, sfp_instr(hw::Op::kReduce, DType::kI64), 4, 100) == 25 + 8);
}

TEST_CASE("a sort is timed by its network, not per element") {
  const sim::ChipConfig c;
  // 4 rows of 5 fp32: each row pads to 8, log2 8 = 3, 3 x 4 / 2 = 6 stages, each one pass over
  // 32 elements at 32 per cycle; + 8 fill.
  CHECK(latency::sfp(c, sfp_instr(hw::Op::kSort, DType::kF32), 4, 5) == 6 * 1 + 8);
  // 1,024 rows of 1,000 fp16: 1,024 padded, 10 x 11 / 2 = 55 stages of 1,048,576 / 64 = 16,384.
  CHECK(latency::sort_network(c, 1024, 1000, DType::kF16) == 55 * 16384 + 8);
}
