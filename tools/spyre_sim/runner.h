// Runs a built-in kernel on a card through the driver, exactly as the PyTorch device runs an op:
// device memory, copies in through mapped host memory, the program loaded into device memory,
// launches on a hardware queue bracketed by TIMESTAMP descriptors, copies out.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels.h"
#include "spyre/driver/device.h"

namespace spyre::simtool {

/// Throws std::runtime_error with the driver's message when `s` is an error.
void check(const driver::Status& s);

/// Device memory of one run, freed when the run ends (also when it fails).
class Allocations {
 public:
  explicit Allocations(driver::Device& dev) : dev_(dev) {}
  ~Allocations();
  Allocations(const Allocations&) = delete;
  Allocations& operator=(const Allocations&) = delete;
  uint64_t alloc(uint64_t bytes);

 private:
  driver::Device& dev_;
  std::vector<uint64_t> addrs_;
};

/// Mapped host memory of at least one byte.
std::unique_ptr<driver::HostBuffer> map(driver::Device& dev, uint64_t bytes);
/// Copies `n` bytes that `fill` writes into mapped host memory to device address `dst`, and waits.
void upload(driver::Device& dev, driver::Queue& q, uint64_t dst, uint64_t n, const std::function<void(void*)>& fill);
/// Copies `n` bytes at device address `src` into `dst`, and waits.
void download(driver::Device& dev, driver::Queue& q, uint64_t src, uint64_t n, void* dst);

/// The device time of a run.
struct RunResult {
  std::vector<uint64_t> launch_cycles;  // end - start of each launch's completion record, in order
  uint64_t span_cycles = 0;             // TIMESTAMP after the last launch minus the one before the first
  double launch_wall_seconds = 0;       // host time from the first launch's submission to the last's end
};

/// Runs `kernel` `repeat` times on `dev` through `queue`: allocates its buffers, copies its inputs
/// in, loads its program, launches it, waits, and reads its output buffers back into their
/// `values` (unless `read_values` is false: a run that computes none still copies them out, for
/// the same transfers, but leaves `values` empty). `formats` says how the card stores fp16. Frees
/// what it allocated.
/// Throws std::runtime_error with the driver's message when a driver call or a command fails.
RunResult run_kernel(driver::Device& dev, driver::Queue& queue, Kernel& kernel, uint32_t repeat, const Formats& formats,
                     bool read_values = true);

}  // namespace spyre::simtool
