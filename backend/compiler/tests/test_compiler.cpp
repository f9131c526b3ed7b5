// Unit tests of the kernel compiler alone (no SystemC, no torch): program size does not grow with
// the problem or the core count, every scratchpad size and core count the config accepts compiles,
// and malformed graphs are rejected with a message naming the problem.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <stdexcept>

#include "spyre/compiler/program.h"

using namespace spyre;
using compiler::ir::Graph;
using compiler::ir::Op;
using compiler::ir::View;

namespace {

View contiguous(uint32_t arg, std::vector<int64_t> sizes, hw::DType t) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  return View{arg, 0, std::move(sizes), std::move(strides), t};
}

Graph matmul_graph(int64_t m, int64_t k, int64_t n, hw::DType t) {
  Graph g;
  g.num_args = 3;
  Op op;
  op.family = Op::Family::kMatmul;
  op.matmul.a = g.add_view(contiguous(0, {m, k}, t));
  op.matmul.b = g.add_view(contiguous(1, {k, n}, t));
  op.matmul.out = g.add_view(contiguous(2, {m, n}, t));
  op.matmul.compute = t;
  g.ops.push_back(op);
  return g;
}

Graph add_graph(int64_t n, hw::DType t) {
  Graph g;
  g.num_args = 2;
  Op op;
  op.pointwise.kind = compiler::ir::PointwiseKind::kBinary;
  op.pointwise.binary = hw::BinaryFn::kAdd;
  op.pointwise.compute = t;
  op.pointwise.inputs = {compiler::ir::Operand::of(g.add_view(contiguous(0, {n}, t))),
                         compiler::ir::Operand::constant(1.0)};
  op.pointwise.out = g.add_view(contiguous(1, {n}, t));
  g.ops.push_back(op);
  return g;
}

Graph sum_graph(int64_t rows, int64_t cols, hw::DType t) {
  Graph g;
  g.num_args = 2;
  Op op;
  op.family = Op::Family::kReduce;
  op.reduce.fn = hw::ReduceFn::kSum;
  op.reduce.compute = t;
  op.reduce.in = g.add_view(contiguous(0, {rows, cols}, t));
  op.reduce.out = g.add_view(contiguous(1, {rows, 1}, t));
  op.reduce.dims = {1};
  g.ops.push_back(op);
  return g;
}

}  // namespace

TEST_CASE("a 16384-cube fp16 GEMM program is under 1 MiB") {
  const compiler::Program p = compiler::compile(matmul_graph(16384, 16384, 16384, hw::DType::kF16), {});
  CHECK(p.image.size() < (1u << 20));
  CHECK(p.core_mask == 0xffffffffull);  // 32 cores
}

TEST_CASE("program size does not grow with the problem or the core count") {
  // The same code runs on every core, in loops: a few KiB whatever the size (the old per-core,
  // unrolled matmul programs grew to 64 MiB and past). The resident-B matmul plan unrolls its
  // steps, up to a bound of its own (lower/matmul_resident.cpp): 128 KiB.
  for (const uint32_t cores : {1u, 32u, 64u}) {
    CAPTURE(cores);
    const compiler::Target t{cores, 2u << 20};
    for (const int64_t n : {int64_t{1} << 10, int64_t{1} << 20, int64_t{1} << 30}) {
      CHECK(compiler::compile(add_graph(n, hw::DType::kF32), t).image.size() < 4096);
      CHECK(compiler::compile(sum_graph(n >> 8, 4096, hw::DType::kF32), t).image.size() < 4096);
    }
    for (const int64_t n : {512, 2048, 4096, 65536}) {
      CAPTURE(n);
      CHECK(compiler::compile(matmul_graph(n, n, n, hw::DType::kF16), t).image.size() < (128u << 10));
    }
  }
}

TEST_CASE("every scratchpad size and core count the config accepts compiles") {
  for (const uint64_t lx : {64ull << 10, 256ull << 10, 1ull << 20, 2ull << 20}) {
    for (const uint32_t cores : {1u, 7u, 16u, 32u, 64u}) {
      CAPTURE(lx);
      CAPTURE(cores);
      const compiler::Target t{cores, lx};
      for (const hw::DType type : {hw::DType::kF32, hw::DType::kF16, hw::DType::kBF16}) {
        CHECK_NOTHROW(compiler::compile(matmul_graph(300, 1000, 70, type), t));
        CHECK_NOTHROW(compiler::compile(add_graph(1'000'003, type), t));
        CHECK_NOTHROW(compiler::compile(sum_graph(33, 1'000'000, type), t));  // split into column tiles
      }
    }
  }
}

TEST_CASE("malformed graphs are rejected with a message, as Malformed: never a reason to fall back") {
  Graph g = matmul_graph(8, 8, 8, hw::DType::kF32);
  g.views[1].sizes = {9, 8};
  CHECK_THROWS_WITH_AS(compiler::compile(g, {}), doctest::Contains("matmul shapes do not agree"), compiler::Malformed);
  g = add_graph(10, hw::DType::kF32);
  g.views[0].arg = 5;
  CHECK_THROWS_WITH_AS(compiler::compile(g, {}), doctest::Contains("malformed view"), compiler::Malformed);
  g = add_graph(10, hw::DType::kF32);
  g.views[0].sizes = {3};
  CHECK_THROWS_WITH_AS(compiler::compile(g, {}), doctest::Contains("does not broadcast"), compiler::Malformed);
}

TEST_CASE("a well-formed graph no lowering takes is Unsupported, which callers may fall back from") {
  Graph g = matmul_graph(8, 8, 8, hw::DType::kF32);
  g.views[2].strides = {1, 8};  // a column-major output: rows not contiguous
  CHECK_THROWS_WITH_AS(compiler::compile(g, {}), doctest::Contains("output rows not contiguous"),
                       compiler::Unsupported);
}

TEST_CASE("a graph read from JSON is the graph built in C++") {
  const Graph built = matmul_graph(64, 32, 16, hw::DType::kF32);
  const Graph read = compiler::ir::graph_from_json(R"({"num_args": 3, "views": [
      {"arg": 0, "offset": 0, "sizes": [64, 32], "strides": [32, 1], "dtype": "f32"},
      {"arg": 1, "offset": 0, "sizes": [32, 16], "strides": [16, 1], "dtype": "f32"},
      {"arg": 2, "offset": 0, "sizes": [64, 16], "strides": [16, 1], "dtype": "f32"}],
      "ops": [{"matmul": {"a": 0, "b": 1, "out": 2, "compute": "f32"}}]})");
  CHECK(read.signature() == built.signature());
  const compiler::Target t;
  CHECK(compiler::compile(read, t).image == compiler::compile(built, t).image);
  CHECK(compiler::listing(compiler::compile(read, t).image).find("MATMUL") != std::string::npos);
}

TEST_CASE("a malformed JSON graph names the field") {
  const auto error = [](const char* text) {
    try {
      compiler::ir::graph_from_json(text);
    } catch (const compiler::Malformed& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(error("{").find("document") != std::string::npos);
  CHECK(error(R"({"num_args": 17, "views": [], "ops": []})").find("num_args") != std::string::npos);
  CHECK(error(R"({"num_args": 1, "views": [{"arg": 0, "offset": 0, "sizes": [2], "strides": [], "dtype": "f32"}],
                  "ops": []})")
            .find("views[0]") != std::string::npos);
  CHECK(error(R"({"num_args": 1, "views": [{"arg": 0, "offset": 0, "sizes": [2], "strides": [1], "dtype": "f64"}],
                  "ops": []})")
            .find("views[0].dtype") != std::string::npos);
  CHECK(error(R"({"num_args": 1, "views": [{"arg": 0, "offset": 0, "sizes": [2], "strides": [1], "dtype": "f32"}],
                  "ops": [{"pointwise": {"compute": "f32", "inputs": [], "out": 0,
                           "steps": [{"kind": "unary", "fn": 99, "args": [0]}]}}]})")
            .find("ops[0].pointwise.steps[0].fn") != std::string::npos);
  CHECK(error(R"({"num_args": 1, "views": [{"arg": 0, "offset": 0, "sizes": [2], "strides": [1], "dtype": "f32"}],
                  "ops": [{"pointwise": {"compute": "f32", "inputs": [{"view": 0}], "out": 0,
                           "steps": [{"kind": "unary", "fn": 1, "args": [-1]}]}}]})")
            .find("earlier step") != std::string::npos);
  CHECK(error(R"({"num_args": 1, "views": [], "ops": [{"sort": {}}]})").find("ops[0]") != std::string::npos);
}

TEST_CASE("an instruction decodes to its operands as the ISA defines them") {
  // Each expectation is written from the field tables of hw/include/spyre/hw/isa.h.
  hw::Instr load{
      hw::Op::kLoad, hw::DType::kBF16, hw::dma_flags(true, 3), hw::pack_regs(2, 1), 0x100, 0x40, 8192, 4, 256};
  CHECK(compiler::disassemble(load) ==
        "LOAD     bf16 lx[r1+0x100] <- mem[r2+0x40] 4 rows x 256 B stride 8192 async tag 3");
  hw::Instr gather{hw::Op::kGather, hw::DType::kF32, 0, hw::pack_regs(5, 6), 0, 0x20, 16ull | 0x800ull << 32, 3, 16};
  CHECK(compiler::disassemble(gather) ==
        "GATHER   f32 lx[0x0] <- mem[r5+0x20][lx[0x800][i] * 16] for 3 rows x 16 B, index < r6");
  hw::Instr scatter = gather;
  scatter.op = hw::Op::kScatter;
  scatter.flags = hw::kScatterAdd;
  CHECK(compiler::disassemble(scatter).rfind("SCATTER  add f32 lx[0x0] -> mem[r5+0x20]", 0) == 0);
  hw::Instr mm{hw::Op::kMatmul,
               hw::DType::kF16,
               hw::kMatmulAccumulate,
               0,
               0x0,
               0x1000 | 0x2000ull << 32,
               hw::pack_mkn(32, 64, 128),
               0,
               0};
  CHECK(compiler::disassemble(mm) == "MATMUL   f16 lx[0x0] += lx[0x1000] @ lx[0x2000], M=32 K=64 N=128");
  hw::Instr add{hw::Op::kBinary,
                hw::DType::kF32,
                hw::bcast_flags(hw::Bcast::kFull, hw::Bcast::kRow),
                0,
                0x300,
                0x100 | 0x200ull << 32,
                static_cast<uint64_t>(hw::BinaryFn::kAdd),
                8,
                64};
  CHECK(compiler::disassemble(add) == "BINARY   f32 lx[0x300] = add(lx[0x100], lx[0x200].row) [8x64]");
  hw::Instr scale = add;  // 2.5f is 0x40200000
  scale.flags = hw::bcast_flags(hw::Bcast::kFull, hw::Bcast::kImm);
  scale.c = static_cast<uint64_t>(hw::BinaryFn::kMul) | 0x40200000ull << 32;
  CHECK(compiler::disassemble(scale) == "BINARY   f32 lx[0x300] = mul(lx[0x100], imm 2.5) [8x64]");
  hw::Instr step{hw::Op::kAddi, hw::DType::kF32, 0, 0, 4, ~uint64_t{0}, 0, 4, 0};
  CHECK(compiler::disassemble(step) == "ADDI     r4 = r4 - 0x1");
  hw::Instr branch{hw::Op::kBranch, hw::DType::kF32, static_cast<uint8_t>(hw::Cond::kLtu), 0, 7, 0, 0, 3, 4};
  CHECK(compiler::disassemble(branch) == "BRANCH   -> 7 if r3 ltu r4");
  // Every opcode has its own line: none falls to the undecoded form.
  for (int op = 0; op < 256; ++op) {
    hw::Instr in{};
    in.op = static_cast<hw::Op>(op);
    if (std::string(hw::op_name(in.op)) == "?") continue;
    CHECK(compiler::disassemble(in).rfind('?', 0) != 0);
  }
}

TEST_CASE("a title leads a pointwise program's name and keeps two ops' programs apart") {
  Graph g;
  g.num_args = 2;
  const uint32_t in = g.add_view(View{0, 0, {4, 8}, {8, 1}, hw::DType::kF32});
  const uint32_t out = g.add_view(View{1, 0, {4, 8}, {8, 1}, hw::DType::kF32});
  compiler::ir::Expr e(hw::DType::kF32);
  const int32_t x = e.input(compiler::ir::Operand::of(in));
  e.unary(hw::UnaryFn::kCopy, x);
  Op op;
  op.family = Op::Family::kPointwise;
  op.pointwise = e.done(out);
  g.ops.push_back(op);
  CHECK(g.name() == "pointwise f32 [4,8]");
  Graph titled = g;
  titled.title = "clone";
  CHECK(titled.name() == "clone (pointwise f32 [4,8])");
  CHECK(titled.signature() != g.signature());  // the name is in the image: another program
  const compiler::Target t;
  CHECK(compiler::compile(titled, t).name == "clone (pointwise f32 [4,8])");
}
