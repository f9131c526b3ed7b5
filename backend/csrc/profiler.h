// Device tracks for torch.profiler: the commands the runtime submits, with the card's own start
// and end cycles from their completion records, handed to kineto as kernels and memcpys. Light
// header: the kineto plugin lives in profiler.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "spyre/driver/device.h"

namespace spyre::backend::profiling {

enum class Kind { kKernel, kMemcpy };

/// True while a torch.profiler session records spyre activity. Cheap.
bool active() noexcept;

/// Notes the command just submitted on `q` as `seq` (stream `stream` of device `device`), named
/// `name` (the ATen op of a kernel, or the direction of a copy). Does nothing unless active().
void note(int device, int64_t stream, const driver::Queue& q, uint64_t seq, Kind kind, const std::string& name,
          uint64_t bytes);

/// Watches `q`'s completions for the profiler; called once when the runtime creates the queue.
void watch(driver::Queue& q);

}  // namespace spyre::backend::profiling
