#include "compiled_graph.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <stdexcept>

#include "aten_util.h"
#include "runtime.h"
#include "spyre/compiler/ops.h"
#include "spyre/compiler/program.h"
#include "spyre/hw/commands.h"

namespace spyre::backend {
namespace {

compiler::ir::Graph graph_of(const std::string& json) {
  return json.find("\"nodes\"") != std::string::npos ? compiler::ops::segment_from_json(json)
                                                     : compiler::ir::graph_from_json(json);
}

}  // namespace

ProgramBytes compile_graph_json(int device, const std::string& json) {
  const compiler::ir::Graph g = graph_of(json);
  const compiler::Program p = compiler::compile(g, DeviceRuntime::get(device).target());
  return {p.name, std::string(p.image.begin(), p.image.end()), p.core_mask, p.num_args};
}

std::string graph_ir_json(const std::string& json) {
  return compiler::ir::graph_to_json(graph_of(json));
}

std::shared_ptr<ProgramHandle> make_program(const std::string& key, ProgramBytes p) {
  TORCH_CHECK(p.num_args <= hw::kMaxLaunchArgs, "spyre: a program with ", p.num_args, " arguments");
  return std::make_shared<ProgramHandle>(ProgramHandle{
      key, compiler::Program{
               std::move(p.name), std::vector<uint8_t>(p.image.begin(), p.image.end()), p.core_mask, p.num_args, {}}});
}

void launch_graphs(const std::vector<GraphLaunch>& launches) {
  if (launches.empty()) return;
  const int device = launches.front().tensors.empty() ? -1 : launches.front().tensors.front().device().index();
  std::vector<DeviceRuntime::LaunchRequest> requests;
  for (const GraphLaunch& g : launches) {
    TORCH_CHECK(!g.tensors.empty(), "spyre: a compiled graph launch without tensors");
    std::vector<uint64_t> args;
    args.reserve(g.tensors.size());
    for (const at::Tensor& t : g.tensors) {
      TORCH_CHECK(t.is_privateuseone() && t.device().index() == device,
                  "spyre: a compiled graph's tensors must all be on spyre:", device, ", got one on ", t.device());
      args.push_back(device_addr(t));
    }
    TORCH_CHECK(g.program, "spyre: a compiled graph launch without a program");
    TORCH_CHECK(g.program->program.num_args == args.size(), "spyre: the program '", g.program->key, "' takes ",
                g.program->program.num_args, " arguments, got ", args.size());
    requests.push_back({g.program->key, [p = g.program] { return p->program; }, std::move(args), g.label});
  }
  const c10::DeviceGuard guard(launches.front().tensors.front().device());
  DeviceRuntime::get(device).launch_sequence(requests);
}

std::map<std::string, double> compile_target(int device) {
  const compiler::Target t = DeviceRuntime::get(device).target();
  return {{"cores", t.cores},
          {"lx_bytes", static_cast<double>(t.lx_bytes)},
          {"clock_mhz", t.clock_mhz},
          {"corelets", t.corelets},
          {"pt_rows", t.pt_rows},
          {"pt_cols", t.pt_cols},
          {"pt_simd", t.pt_simd},
          {"fp32_rate", t.fp32_rate},
          {"lx_read_bytes_per_cycle", t.lx_read_bytes_per_cycle},
          {"sfp_lanes", t.sfp_lanes},
          {"ring_bytes_per_cycle", t.ring_bytes_per_cycle},
          {"memory_controllers", t.memory_controllers},
          {"memory_mbps", static_cast<double>(t.memory_mbps)},
          {"load_bytes_per_cycle", t.load_bytes_per_cycle()},
          {"pt_macs_per_cycle", t.pt_macs_per_cycle()}};
}

std::map<std::string, std::pair<std::string, uint32_t>> op_catalogue() {
  std::map<std::string, std::pair<std::string, uint32_t>> out;
  for (const auto& [name, e] : compiler::ops::catalogue()) out[name] = {e.family, e.results};
  return out;
}

std::map<std::string, int64_t> limits() {
  return {{"max_launch_args", hw::kMaxLaunchArgs}, {"max_pointwise_inputs", compiler::kMaxPointwiseInputs}};
}

}  // namespace spyre::backend
