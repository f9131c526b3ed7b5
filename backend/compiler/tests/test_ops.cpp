// The op library's contract with its front doors: segments read from JSON (errors name the field or
// the node), temporaries kept inside the region a node is given, fusion only within one compute
// type, and what examine() tells the planner. The ops' values are checked against CPU PyTorch by
// the backend's tests (both front doors run every op through this library).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "spyre/compiler/ops.h"
#include "spyre/compiler/program.h"

using namespace spyre;
namespace ops = compiler::ops;

namespace {

std::string error_of(const std::string& text) {
  try {
    ops::segment_from_json(text);
  } catch (const compiler::Malformed& e) {
    return e.what();
  } catch (const compiler::Unsupported& e) {
    return std::string("unsupported: ") + e.what();
  }
  return "accepted";
}

// A [4, 8] fp32 input (arg 0), its [4, 8] result (arg 1), an arena (arg 2).
std::string softmax_segment(const std::string& temp) {
  return R"({"num_args": 3, "views": [
      {"arg": 0, "offset": 0, "sizes": [4, 8], "strides": [8, 1], "dtype": "f32"},
      {"arg": 1, "offset": 0, "sizes": [4, 8], "strides": [8, 1], "dtype": "f32"}],
      "nodes": [{"op": "_softmax", "args": {"self": {"view": 0}, "dim": -1, "half_to_float": false},
                 "outs": [1], "result": "f32", "common": "f32")" +
         (temp.empty() ? "" : ", \"temp\": " + temp) + "}]}";
}

}  // namespace

TEST_CASE("a segment's nodes become the library's IR, which compiles") {
  const compiler::ir::Graph g = ops::segment_from_json(R"({"num_args": 2, "views": [
      {"arg": 0, "offset": 0, "sizes": [64], "strides": [1], "dtype": "f32"},
      {"arg": 1, "offset": 0, "sizes": [64], "strides": [1], "dtype": "f32"}],
      "nodes": [{"op": "add", "args": {"self": {"view": 0}, "alpha": 1,
                 "other": {"node": {"op": "mul", "args": {"self": {"view": 0}, "other": 2.5}, "result": "f32"}}},
                 "outs": [1], "result": "f32", "common": "f32"}]})");
  REQUIRE(g.ops.size() == 1);                    // x + x * 2.5: one expression, x read once
  CHECK(g.ops[0].pointwise.inputs.size() == 2);  // x and 2.5
  CHECK(g.ops[0].pointwise.steps.size() == 2);
  CHECK(compiler::compile(g, {}).image.size() > 0);
}

TEST_CASE("malformed segments name the node and field") {
  CHECK(error_of(R"({"num_args": 1, "views": [], "nodes": [{"args": {}}]})").find("nodes[0]") != std::string::npos);
  CHECK(error_of(R"({"num_args": 1, "views": [], "nodes": [{"op": "add", "args": {"self": {"view": 3}}}]})")
            .find("nodes[0].args.self.view") != std::string::npos);
  CHECK(error_of(R"({"num_args": 1, "views": [{"arg": 0, "offset": 0, "sizes": [2], "strides": [1], "dtype": "f32"}],
                     "nodes": [{"op": "frobnicate", "args": {}, "outs": [0]}]})")
            .find("unsupported: segment: nodes[0] (frobnicate): ops: frobnicate: the op library does not lower") == 0);
  CHECK(error_of(R"({"num_args": 1, "views": [{"arg": 0, "offset": 0, "sizes": [2], "strides": [1], "dtype": "f32"}],
                     "nodes": [{"op": "add", "args": {"self": {"view": 0}, "other": {"tensor": 1}}, "outs": [0]}]})")
            .find("nodes[0].args.other") != std::string::npos);
  CHECK(error_of(R"({"num_args": 1, "views": [{"arg": 0, "offset": 0, "sizes": [2], "strides": [1], "dtype": "f32"}],
                     "nodes": [{"op": "add", "args": {"self": {"view": 0}, "other": 1}}]})")
            .find("result 0 has no view") != std::string::npos);
}

TEST_CASE("a node's temporaries stay inside the region it is given") {
  const std::vector<ops::NodeInfo> info = ops::examine(softmax_segment(""));
  REQUIRE(info.size() == 1);
  const uint64_t need = info[0].temp_bytes;
  CHECK(need >= 3 * 4 * 4 + 4 * 8 * 4);  // at least the row max, the row sum and the exponentials
  CHECK(info[0].compute == std::nullopt);
  CHECK(info[0].args == std::vector<uint32_t>{0, 1});
  const std::string fits = R"({"arg": 2, "offset": 128, "bytes": )" + std::to_string(need) + "}";
  const compiler::ir::Graph g = ops::segment_from_json(softmax_segment(fits));
  for (const compiler::ir::View& v : g.views) {
    if (v.arg == 2) CHECK(v.offset * 4 >= 128);
  }
  const std::string short_by_one = R"({"arg": 2, "offset": 128, "bytes": )" + std::to_string(need - 1) + "}";
  const std::string overflow = error_of(softmax_segment(short_by_one));  // Malformed: smaller than asked for
  CHECK((overflow.find("overflow") != std::string::npos && overflow.find("unsupported") == std::string::npos));
  CHECK(error_of(softmax_segment(R"({"arg": 2, "offset": 100, "bytes": 4096})")).find("multiple of 64") !=
        std::string::npos);
  CHECK(error_of(softmax_segment(R"({"arg": 7, "offset": 0, "bytes": 4096})")).find("temp.arg") != std::string::npos);
}

TEST_CASE("expressions fuse only within one compute type") {
  // (idx == 3) computes in int64: inside an fp32 expression it would compare rounded indices.
  const std::string text = R"({"num_args": 3, "views": [
      {"arg": 0, "offset": 0, "sizes": [8], "strides": [1], "dtype": "i64"},
      {"arg": 1, "offset": 0, "sizes": [8], "strides": [1], "dtype": "f32"},
      {"arg": 2, "offset": 0, "sizes": [8], "strides": [1], "dtype": "f32"}],
      "nodes": [{"op": "mul", "args": {"self": {"view": 1},
                 "other": {"node": {"op": "eq", "args": {"self": {"view": 0}, "other": 3},
                                    "result": "bool", "common": "i64"}}},
                 "outs": [2], "result": "f32", "common": "f32"}]})";
  CHECK(error_of(text).find("unsupported: ") == 0);  // well formed: the front door runs it unfused
  CHECK(error_of(text).find("cannot be fused") != std::string::npos);
  const std::vector<ops::NodeInfo> info = ops::examine(R"({"num_args": 2, "views": [
      {"arg": 0, "offset": 0, "sizes": [8], "strides": [1], "dtype": "i64"},
      {"arg": 1, "offset": 0, "sizes": [8], "strides": [1], "dtype": "bool"}],
      "nodes": [{"op": "eq", "args": {"self": {"view": 0}, "other": 3}, "outs": [1], "result": "bool", "common": "i64"}]})");
  CHECK(info.at(0).compute == hw::DType::kI64);
}

TEST_CASE("the catalogue names every family and the results each op writes") {
  const std::map<std::string, ops::Entry> all = ops::catalogue();
  CHECK(all.at("add").kind == ops::Kind::kPointwise);
  CHECK(all.at("addmm").family == "matmul");
  CHECK(all.at("max").results == 2);
  CHECK(all.at("_scaled_dot_product_fused_attention_overrideable").results == 2);
  CHECK(ops::kind("frobnicate") == ops::Kind::kNone);
}
