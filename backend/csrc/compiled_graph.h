// The torch.compile front door's calls into the compiler and the runtime (bound in module.cpp):
// compile a graph given as JSON for a device, keep the result under a key, launch it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace spyre::backend {

/// A compiled program as bytes, so that the front door can keep it on disk.
struct ProgramBytes {
  std::string name;
  std::string image;
  uint64_t core_mask = 0;
  uint32_t num_args = 0;
};

/// Compiles the JSON graph (compiler::ir::graph_from_json) for device `device`'s target. Throws
/// std::invalid_argument (a ValueError) naming what the compiler does not take.
ProgramBytes compile_graph_json(int device, const std::string& json);
/// Keeps `p` under `key` for launch_graph (the runtime uploads it on first launch).
void install_program(const std::string& key, ProgramBytes p);
/// One launch of a kept program: argument slot i is tensors[i]'s address; `label` names the launch
/// in traces and profiles.
struct GraphLaunch {
  std::string key;
  std::vector<at::Tensor> tensors;
  std::string label;
};
/// Queues the launches in order on the current stream of their tensors' device, their argument
/// blocks in one upload.
void launch_graphs(const std::vector<GraphLaunch>& launches);
/// The target a device compiles for, as the fields the program depends on (the disk cache's key).
std::map<std::string, double> compile_target(int device);
/// ATen pointwise op names with the SFP function each maps to: {"unary": {...}, "binary": {...}}.
std::map<std::string, std::map<std::string, int>> pointwise_functions();

}  // namespace spyre::backend
