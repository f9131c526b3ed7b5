// The spyre tensor allocator (c10's PrivateUse1 DeviceAllocator) over the per-device caching
// allocator, and the controls torch.spyre exposes for it. Light header: c10 only.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <vector>

namespace spyre::backend {

/// The allocator registered for PrivateUse1 (what torch.empty(..., device="spyre") uses).
c10::DeviceAllocator& device_allocator();

/// A storage of its own over bytes [offset, offset + nbytes) of `block` (a compiled program's out
/// block: one allocation, one launch argument). Each part keeps the block alive, so the block is
/// freed when its last part dies; a part grows (resize_) into new memory as any storage does, and
/// recording a stream on it records it on the block. ValueError when the range is not in the block.
c10::Storage storage_part(const c10::Storage& block, uint64_t offset, uint64_t nbytes);

/// The device whose tensor memory `p` points into; -1 when no spyre allocator handed it out.
int device_of_pointer(const void* p);

/// Caps memory reserved on `device` at `fraction` of its memory (torch.spyre.
/// set_per_process_memory_fraction). Throws ValueError outside [0, 1], IndexError for a bad device.
void set_memory_fraction(int device, double fraction);
/// The cap set by set_memory_fraction (1.0 by default).
double memory_fraction(int device);

/// Creates a memory pool on `device` and returns its id (nonzero, unique in the process).
uint64_t create_mem_pool(int device);
/// Takes at least `bytes` into `pool` on the current stream ahead of use; throws
/// torch.OutOfMemoryError when the device cannot give them.
void reserve_mem_pool(uint64_t pool, uint64_t bytes);
/// Releases `pool`: its cached memory goes back to the driver now, the rest as its tensors die.
/// Never throws for an unknown pool (a pool may be released once only; later calls do nothing).
void release_mem_pool(uint64_t pool) noexcept;
/// Routes this thread's allocations on the pool's device into `pool` until the matching
/// end_mem_pool. Nests. ValueError for an unknown pool.
void begin_mem_pool(uint64_t pool);
/// Ends the innermost begin_mem_pool(pool) of this thread; ValueError if that is not the innermost.
void end_mem_pool(uint64_t pool);

/// For benchmarks: times `batches` batches of `per_batch` allocations and frees of `bytes` on
/// `device`, through the tensor allocator (`driver_path` false) or straight through the driver,
/// and returns microseconds per allocation plus free for each batch. With `background` > 0, that
/// many blocks of 4 KiB to 256 KiB are allocated the same way first and every other one freed, so
/// the timing sees a populated, fragmented heap. ValueError for non-positive counts.
std::vector<double> time_alloc_free(int device, uint64_t bytes, int batches, int per_batch, bool driver_path,
                                    int background);

}  // namespace spyre::backend
