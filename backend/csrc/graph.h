// torch.accelerator.Graph for spyre (graph.cpp).
#pragma once

namespace spyre::backend {

/// Registers spyre's graph implementation under the PrivateUse1 device's current name. Called
/// from Python once torch_spyre has renamed the device; later calls do nothing.
void register_graph_impl();

}  // namespace spyre::backend
