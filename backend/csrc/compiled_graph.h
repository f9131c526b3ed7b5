// The torch.compile front door's calls into the compiler and the runtime (bound in module.cpp):
// compile a graph given as JSON for a device, hold the result as a program handle, launch it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "spyre/compiler/program.h"

namespace spyre::backend {

/// A compiled program as bytes, so that the front door can keep it on disk.
struct ProgramBytes {
  std::string name;
  std::string image;
  uint64_t core_mask = 0;
  uint32_t num_args = 0;
};

/// Compiles a JSON document for device `device`'s target: a planner's segment (views and calls,
/// compiler::ops::segment_from_json) when it has "nodes", else an IR graph
/// (compiler::ir::graph_from_json). Throws compiler::Unsupported naming what the op library or the
/// compiler does not take, compiler::Malformed for a malformed document.
ProgramBytes compile_graph_json(int device, const std::string& json);
/// The IR graph of a JSON document as compile_graph_json reads it, as JSON (for debug dumps).
std::string graph_ir_json(const std::string& json);
/// A compiled graph's program, held by the compiled graph that launches it (torch_spyre._compile):
/// it lives as long as they do, so programs of graphs torch has dropped go too. `key` names it in
/// the runtime's program cache (which uploads it on first launch, and again after an eviction).
struct ProgramHandle {
  std::string key;
  compiler::Program program;
};
std::shared_ptr<ProgramHandle> make_program(const std::string& key, ProgramBytes p);
/// One launch of a program: argument slot i is tensors[i]'s address; `label` names the launch in
/// traces and profiles.
struct GraphLaunch {
  std::shared_ptr<const ProgramHandle> program;
  std::vector<at::Tensor> tensors;
  std::string label;
};
/// Queues the launches in order on the current stream of their tensors' device, their argument
/// blocks in one upload.
void launch_graphs(const std::vector<GraphLaunch>& launches);
/// The target a device compiles for, as the fields the program depends on (the disk cache's key).
std::map<std::string, double> compile_target(int device);
/// What the planner asks the op library and the hardware interface: every op the library lowers,
/// with its family ("pointwise" ones fuse) and how many leading results it writes, and the limits
/// a segment must keep ("max_launch_args", "max_pointwise_inputs": tensors one pointwise op reads).
std::map<std::string, std::pair<std::string, uint32_t>> op_catalogue();
std::map<std::string, int64_t> limits();
}  // namespace spyre::backend
