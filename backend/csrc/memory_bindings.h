// Registers torch_spyre._C's device-memory functions (memory_bindings.cpp) on the extension module.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace spyre::backend {

/// Adds _allocator_stats, _empty_cache, the memory-pool and memory-fraction functions and the
/// allocation benchmark helper to `m`. Called once, by the module initialiser.
void bind_memory(pybind11::module_& m);

}  // namespace spyre::backend
