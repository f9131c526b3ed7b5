// `spyre-sim ktir FILE`: a KTIR kernel (spyre/compiler/ktir.h) as a built-in kernel of spyre-sim.
// Its arguments become buffers as large as the kernel's views reach, float ones filled with seeded
// values in [-1, 1) and integer ones with zeros (no values: the runner uploads zeros) (a valid index into any view);
// its roofline's work is what the lowering counted. There is no host golden model: torch_spyre.ktir checks the examples
// against CPU torch.
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels.h"
#include "spyre/compiler/ktir.h"

namespace spyre::simtool {

Kernel make_ktir(const BuildEnv& env, const std::string& path, const std::string& function, std::string* listing) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("ktir: cannot read {}", path));
  std::stringstream text;
  text << in.rdbuf();
  const compiler::ktir::Kernel k = compiler::ktir::compile(text.str(), env.target, function);
  if (listing) *listing = compiler::ktir::listing(k, text.str());
  Kernel kern;
  kern.name = "ktir";
  kern.op = k.function;
  kern.dtype = k.arguments.empty() ? hw::DType::kF32 : k.arguments.front().dtype;
  std::mt19937_64 rng(env.seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const compiler::ktir::Argument& a : k.arguments) {
    Buffer b;
    b.name = a.name;
    b.dtype = a.dtype;
    b.numel = std::max<uint64_t>(a.bytes / hw::dtype_size(a.dtype), 1);
    b.role = Buffer::Role::kInput;
    if (env.values && hw::dtype_is_float(a.dtype)) {  // integers go up as zeros
      b.values.resize(b.numel);
      for (float& x : b.values) x = round_to(a.dtype, env.formats, dist(rng));
    }
    kern.work.min_bytes += b.bytes();
    kern.buffers.push_back(std::move(b));
    kern.args.push_back(static_cast<uint32_t>(kern.buffers.size() - 1));
  }
  if (k.workspace_bytes) {
    Buffer w;
    w.name = "workspace";
    w.dtype = hw::DType::kI8;
    w.numel = k.workspace_bytes;
    kern.buffers.push_back(std::move(w));
    kern.args.push_back(static_cast<uint32_t>(kern.buffers.size() - 1));
  }
  kern.dims = {{"tiles", static_cast<int64_t>(k.source_lines.size())}};
  kern.program = k.program;
  kern.work.matmul_flops = 2.0 * static_cast<double>(k.work.macs);
  kern.work.matmul_dtype = k.work.fp32_macs * 2 > k.work.macs ? hw::DType::kF32 : hw::DType::kF16;
  kern.work.vector.push_back(VectorWork{static_cast<double>(k.work.sfp_elements), hw::DType::kF32, false});
  kern.work.min_bytes = k.work.load_bytes + k.work.store_bytes;
  kern.work.min_store_bytes = k.work.store_bytes;
  return kern;
}

}  // namespace spyre::simtool
