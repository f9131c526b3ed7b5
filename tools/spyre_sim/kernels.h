// The built-in kernels of spyre-sim. Each builds its device program through the kernel compiler
// (as the PyTorch device does: a matmul spec or an IR graph), its input data from a seeded
// generator, its analytical work for the roofline, and the host golden model that checks it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "golden.h"
#include "numerics.h"
#include "spyre/compiler/program.h"
#include "spyre/hw/isa.h"

namespace spyre::simtool {

/// A device buffer of a kernel. Inputs hold their values (already rounded to `dtype`); the runner
/// reads outputs back into `values`; scratch buffers only need device memory.
struct Buffer {
  enum class Role : uint8_t { kInput, kOutput, kScratch };
  std::string name;
  hw::DType dtype = hw::DType::kF32;
  uint64_t numel = 0;
  Role role = Role::kScratch;
  std::vector<float> values;

  uint64_t bytes() const { return numel * hw::dtype_size(dtype); }
};

/// SFP work of one launch, for the roofline's compute time: `elements` results of one SFP step
/// computed in `dtype`, each step simple or transcendental (docs/architect-guide.md, timing).
struct VectorWork {
  double elements = 0;
  hw::DType dtype = hw::DType::kF32;
  bool transcendental = false;
};

/// What one launch computes, whatever the program does: the inputs of the roofline.
struct Work {
  double matmul_flops = 0;  // 2 * M * N * K of every product, on the PT arrays
  hw::DType matmul_dtype = hw::DType::kF16;
  std::vector<VectorWork> vector;  // elementwise and reduction steps, on the SFPs
  uint64_t min_bytes = 0;          // compulsory device-memory traffic: inputs read once, outputs written once
  uint64_t min_store_bytes = 0;    // the outputs' part of it

  /// Matmul flops plus one operation per vector element.
  double flops() const;
};

struct Kernel {
  std::string name;                                   // the subcommand: "gemm", "attention", ...
  std::vector<std::pair<std::string, int64_t>> dims;  // the shape, as given: {"m", 512}, ...
  std::string op;                                     // elementwise only: the function
  hw::DType dtype = hw::DType::kF32;
  std::vector<Buffer> buffers;
  compiler::Program program;
  std::vector<uint32_t> args;  // the buffer of each launch argument slot
  Work work;
  double check_size = 0;  // the measure of size that decides whether --check is on by default
  /// The expected output, computed from the input buffers by the host golden model (golden.h).
  std::function<Expected(const Kernel&)> golden;

  /// "gemm m=512 k=512 n=512 f16", for messages, traces and the summary.
  std::string title() const;
};

/// What every builder needs: the compiler's view of the card, how it stores fp16, the seed.
struct BuildEnv {
  compiler::Target target;
  Formats formats;
  uint64_t seed = 0;
  bool values = true;  // false (sim.mode "timing"): inputs get no values, and go up as zeros
};

/// C = A @ B, A: m x k, B: k x n, all `dtype` (f32, f16 or bf16), through compiler::compile_matmul.
Kernel make_gemm(const BuildEnv& env, uint32_t m, uint32_t k, uint32_t n, hw::DType dtype);

/// out = op(a) or op(a, b) over `numel` elements of `dtype`: one pointwise op of an IR graph,
/// computed in `dtype`. Throws std::invalid_argument naming the op when it is not one of
/// elementwise_ops().
Kernel make_elementwise(const BuildEnv& env, const std::string& op, uint64_t numel, hw::DType dtype);
/// The function names make_elementwise takes.
std::vector<std::string> elementwise_ops();

/// out = (x - mean) / sqrt(var + eps) over each row of a rows x cols `dtype` matrix: one graph of
/// reductions and pointwise steps in fp32, as the PyTorch device's layer_norm kernel builds it.
Kernel make_layernorm(const BuildEnv& env, uint32_t rows, uint32_t cols, double eps, hw::DType dtype);

/// O = softmax(Q K^T / sqrt(dim)) V over [batch, heads, seq, dim] `dtype` tensors: one graph of
/// matmul, row max, exp, row sum, divide and matmul (scores and softmax in fp32), as the PyTorch
/// device's attention kernel builds it without masking.
Kernel make_attention(const BuildEnv& env, uint32_t batch, uint32_t heads, uint32_t seq, uint32_t dim, hw::DType dtype);

/// The simulator's own cost per instruction: every core of `cores` runs a loop of seven SFP adds
/// of one on a 16-element fp32 tile, plus its counter and branch, until `count` instructions
/// have run over all cores; then stores its tile, which must hold 7 x its iterations.
Kernel make_instructions(const BuildEnv& env, uint64_t count, uint32_t cores);

/// A KTIR kernel from file `path` (its function `function`, or the one with a grid when empty),
/// compiled for env.target (spyre/compiler/ktir.h); `listing`, when given, receives its listing
/// grouped by KTIR line. It has no golden model (`golden` is empty). Throws what the KTIR compiler
/// throws, and std::runtime_error when the file cannot be read.
Kernel make_ktir(const BuildEnv& env, const std::string& path, const std::string& function, std::string* listing);

}  // namespace spyre::simtool
