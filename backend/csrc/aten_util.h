// Helpers shared by the ATen kernels of the Spyre device. Include only from ATen translation units.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <string>
#include <utility>

namespace spyre::backend {

/// Device address of the tensor's first element.
uint64_t device_addr(const at::Tensor& t);
/// (device address, bytes) of the storage range that a strided tensor covers.
std::pair<uint64_t, uint64_t> device_span(const at::Tensor& t);
/// Copies a device tensor to a CPU tensor with the same sizes and strides. Blocks.
at::Tensor read_device(const at::Tensor& src);
/// Writes a CPU tensor (any dtype, any strides, broadcastable) into a device tensor. With
/// `non_blocking`, a copy straight from pinned memory returns before the card has read it.
void write_device(const at::Tensor& dst, const at::Tensor& src_cpu, bool non_blocking = false);
/// The default random generator of spyre device `index` (random_ops.cpp).
const at::Generator& default_generator(c10::DeviceIndex index);
/// Why this thread's last kernel did not take its call (the op library's or the compiler's
/// words): the next CPU fallback's error or warning says it, instead of "no Spyre kernel".
void note_rejection(const std::string& why);
/// Runs a boxed op through the CPU fallback, honouring TORCH_SPYRE_CPU_FALLBACK.
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack);
/// The same for an op CPU has no kernel of (convolution_overrideable): runs `cpu_op`, whose
/// arguments the stack holds, under the policy and counts of `named`.
void run_on_cpu_as(const c10::OperatorHandle& named, const c10::OperatorHandle& cpu_op, torch::jit::Stack* stack);

}  // namespace spyre::backend
