// Unit tests of the KTIR reader and lowering alone (no SystemC, no torch): affine arithmetic
// against MLIR's definitions (floor division, a non-negative modulo), sets read as boxes, the
// statements of a file told apart, programs whose size follows the grid and the unrolled loops,
// and refusals that name the construct or the line. Values are checked on the card by
// backend/tests/test_ktir.py against CPU torch.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "../src/ktir/affine.h"
#include "../src/ktir/syntax.h"
#include "spyre/compiler/errors.h"
#include "spyre/compiler/ktir.h"

using namespace spyre::compiler;
using namespace spyre::compiler::ktir;

namespace {

int64_t value_of(const std::string& text, const Lookup& lookup) {
  const std::vector<Token> t = tokenize(text);
  size_t at = 0;
  const Expr e = parse_expr(t, &at);
  CHECK(at == t.size());
  return eval(e, lookup);
}

const char* kCopy = R"(
#set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 3 >= 0, d1 >= 0, -d1 + 15 >= 0)>
module {
  func.func @copy(%src: index, %dst: index) attributes {grid = [GRID]} {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %id = ktdp.get_compute_tile_id : index
    %row = arith.muli %id, %c4 : index
    %S = ktdp.construct_memory_view %src, sizes: [64, 16], strides: [16, 1] {
      memory_space = #ktdp.memory_space<global>
    } : memref<64x16xf32>
    %D = ktdp.construct_memory_view %dst, sizes: [64, 16], strides: [16, 1] {
      memory_space = #ktdp.spyre_memory_space<HBM>
    } : memref<64x16xf32>
    %st = ktdp.construct_access_tile %S[%row, %c0] {access_tile_set = #set}
        : memref<64x16xf32> -> !ktdp.access_tile<4x16xindex>
    %x = ktdp.load %st : !ktdp.access_tile<4x16xindex> -> tensor<4x16xf32>
    %dt = ktdp.construct_access_tile %D[%row, %c0] {access_tile_set = #set}
        : memref<64x16xf32> -> !ktdp.access_tile<4x16xindex>
    ktdp.store %x, %dt : tensor<4x16xf32>, !ktdp.access_tile<4x16xindex>
    return
  }
}
)";

std::string with_grid(int grid) {
  std::string s = kCopy;
  s.replace(s.find("GRID"), 4, std::to_string(grid));
  return s;
}

}  // namespace

TEST_CASE("affine expressions divide by floor and take a non-negative modulo, as MLIR defines them") {
  const Lookup lookup = [](const std::string& n) -> int64_t { return n == "%i" ? -7 : n == "%j" ? 3 : 0; };
  CHECK(value_of("%i floordiv 2", lookup) == -4);  // floor(-3.5)
  CHECK(value_of("%i ceildiv 2", lookup) == -3);
  CHECK(value_of("%i mod 3", lookup) == 2);  // -7 = 3 * -3 + 2
  CHECK(value_of("%i % 3", lookup) == 2);
  CHECK(value_of("(%i + 10) * %j - 1", lookup) == 8);
  CHECK(value_of("-%j + 4 * 2", lookup) == 5);
  CHECK_THROWS_AS(value_of("%j / 0", lookup), Malformed);
}

TEST_CASE("a set of single-dim bounds is a box; a coupled bound is refused by name") {
  const Set s = parse_set("affine_set<(d0, d1) : (d0 - 2 >= 0, -d0 + 9 >= 0, d1 == 5)>", 1);
  const auto b = box(s, {}, "test");
  REQUIRE(b.size() == 2);
  CHECK(b[0] == std::make_pair<int64_t, int64_t>(2, 9));
  CHECK(b[1] == std::make_pair<int64_t, int64_t>(5, 5));
  CHECK(contains(s, {2, 5}, {}));
  CHECK_FALSE(contains(s, {10, 5}, {}));
  const Set triangle = parse_set("affine_set<(d0, d1) : (d0 >= 0, d1 - d0 >= 0, -d1 + 7 >= 0)>", 3);
  CHECK_THROWS_WITH_AS(box(triangle, {}, "line 3"), "ktir: line 3: a set that is not a box (a bound couples two dims)",
                       Unsupported);
  // The brace form, a symbol, and a quasi-affine constraint evaluated at a point.
  const Set ring = parse_set("affine_set<(i)[g] : ((g + 31) mod 32 - i == 0)>", 4);
  CHECK(contains(ring, {31}, {0}));
  CHECK(contains(ring, {4}, {5}));
  CHECK_FALSE(contains(ring, {5}, {5}));
  const Set brace = parse_set("{(d0, d1) | 0 <= d0 < 2, 0 <= d1 < 64}", 5);
  CHECK(box(brace, {}, "brace")[1] == std::make_pair<int64_t, int64_t>(0, 63));
}

TEST_CASE("statements are told apart without each op's grammar, regions and attribute dicts too") {
  const Module m = parse(with_grid(16));
  REQUIRE(m.ops.size() == 1);
  CHECK(m.aliases.count("#set") == 1);
  const Op& func = m.ops[0].regions.at(0).blocks.at(0).ops.at(0);
  CHECK(func.name == "func.func");
  const std::vector<Op>& body = func.regions.at(0).blocks.at(0).ops;
  REQUIRE(body.size() == 11);
  CHECK(body[4].name == "ktdp.construct_memory_view");  // its attribute dict spans three lines
  CHECK(body[4].regions.empty());
  CHECK(body[7].name == "ktdp.load");
  CHECK(body[7].line == 17);
  CHECK(body[10].name == "return");
}

TEST_CASE("the program has one instruction stream per tile of the grid") {
  for (int grid : {1, 4, 16}) {
    const Kernel k = ktir::compile(with_grid(grid), Target{});
    CHECK(k.source_lines.size() == static_cast<size_t>(grid));
    CHECK(k.program.core_mask == (grid == 64 ? ~0ull : (1ull << grid) - 1));
    CHECK(k.arguments.size() == 2);
    CHECK(k.arguments[0].bytes == 64 * 16 * 4);
    CHECK(k.work.load_bytes == static_cast<uint64_t>(grid) * 4 * 16 * 4);
  }
}

TEST_CASE("refusals name the construct and the line") {
  std::string text = with_grid(16);
  CHECK_THROWS_WITH_AS(ktir::compile(with_grid(64), Target{}),
                       "ktir: copy: grid [64] has more tiles than the card's 32 cores", Unsupported);
  std::string big = text;
  big.replace(big.find("%c4 = arith.constant 4"), 22, "%c4 = arith.constant 5");
  CHECK_THROWS_WITH_AS(ktir::compile(big, Target{}),
                       "ktir: line 15: the access tile [65, 0] + [4, 16] leaves its view [64, 16] (tile 13)",
                       Malformed);
  std::string absolute = text;
  absolute.replace(absolute.find("construct_memory_view %src"), 26, "construct_memory_view %c0");
  CHECK_THROWS_WITH_AS(
      ktir::compile(absolute, Target{}),
      "ktir: line 9: a memory view at an absolute address: pass the tensor's base as an index argument "
      "of the function",
      Unsupported);
  std::string loop = text;
  loop.replace(loop.find("    return"), 10, "    scf.while\n    return");
  CHECK_THROWS_WITH_AS(ktir::compile(loop, Target{}), "ktir: line 21: scf.while is not supported", Unsupported);
  CHECK_THROWS_WITH_AS(ktir::compile(text.substr(0, text.rfind('}')), Target{}),
                       "ktir: line 22: a region is not closed", Malformed);
  CHECK_THROWS_AS(ktir::compile(text, Target{2, 2u << 20}), Unsupported);  // a grid of 16 on two cores
}
