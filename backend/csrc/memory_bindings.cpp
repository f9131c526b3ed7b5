// torch_spyre._C's device-memory functions (torch.spyre.memory_stats, empty_cache, memory pools, the
// memory fraction), kept apart from module.cpp so each binding file has one subject.
#include <ATen/ATen.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include "device_allocator.h"
#include "memory_bindings.h"
#include "runtime.h"

namespace py = pybind11;

namespace spyre::backend {
namespace {

// {"current", "peak", "allocated", "freed"} of one figure, as torch.cuda.memory_stats nests them.
py::dict stat_dict(const c10::CachingAllocator::Stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

py::dict stat_array_dict(const c10::CachingAllocator::StatArray& a) {
  static const char* const kPools[] = {"all", "small_pool", "large_pool"};
  py::dict d;
  for (size_t i = 0; i < a.size(); ++i) d[kPools[i]] = stat_dict(a[i]);
  return d;
}

// The allocator's figures for `index`, nested as torch.cuda.memory_stats builds them before
// flattening ("allocated_bytes" -> "all" -> "current").
py::dict allocator_stats(int index) {
  const c10::CachingDeviceAllocator::DeviceStats s =
      device_allocator().getDeviceStats(static_cast<c10::DeviceIndex>(index));
  py::dict d;
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["max_split_size"] = s.max_split_size;
  d["num_sync_all_streams"] = s.num_sync_all_streams;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  d["allocation"] = stat_array_dict(s.allocation);
  d["segment"] = stat_array_dict(s.segment);
  d["active"] = stat_array_dict(s.active);
  d["inactive_split"] = stat_array_dict(s.inactive_split);
  d["allocated_bytes"] = stat_array_dict(s.allocated_bytes);
  d["reserved_bytes"] = stat_array_dict(s.reserved_bytes);
  d["active_bytes"] = stat_array_dict(s.active_bytes);
  d["inactive_split_bytes"] = stat_array_dict(s.inactive_split_bytes);
  d["requested_bytes"] = stat_array_dict(s.requested_bytes);
  d["oversize_allocations"] = stat_dict(s.oversize_allocations);
  d["oversize_segments"] = stat_dict(s.oversize_segments);
  return d;
}

// The driver's own figures: everything it has handed out, the allocator's segments and the
// runtime's programs and launch arguments alike.
py::dict driver_memory(int index) {
  const driver::MemoryStats s = DeviceRuntime::get(index).device().memory_stats();
  py::dict d;
  d["total"] = s.total;
  d["allocated"] = s.allocated;
  d["peak"] = s.peak;
  d["largest_free"] = s.largest_free;
  d["blocks"] = s.allocations;
  return d;
}

}  // namespace

void bind_memory(py::module_& m) {
  // A compiled program's results over its out block: (offset, bytes, sizes, strides, dtype) each, a
  // tensor of its own over a storage of its own (storage_part).
  using Part = std::tuple<uint64_t, uint64_t, std::vector<int64_t>, std::vector<int64_t>, at::ScalarType>;
  m.def("_block_parts", [](const at::Tensor& block, const std::vector<Part>& parts) {
    HANDLE_TH_ERRORS
    std::vector<at::Tensor> out;
    out.reserve(parts.size());
    for (const auto& [offset, nbytes, sizes, strides, dtype] : parts) {
      at::Tensor t = at::empty({0}, block.options().dtype(dtype));
      t.set_(storage_part(block.storage(), offset, nbytes), 0, sizes, strides);
      out.push_back(std::move(t));
    }
    return out;
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_allocator_stats", [](int index) {
    HANDLE_TH_ERRORS
    return allocator_stats(index);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_driver_memory_stats", [](int index) {
    HANDLE_TH_ERRORS
    return driver_memory(index);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_empty_cache", [] {
    HANDLE_TH_ERRORS
    device_allocator().emptyCache({0, 0});
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_reset_peak_memory_stats", [](int index) {
    HANDLE_TH_ERRORS
    device_allocator().resetPeakStats(static_cast<c10::DeviceIndex>(index));
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_reset_accumulated_memory_stats", [](int index) {
    HANDLE_TH_ERRORS
    device_allocator().resetAccumulatedStats(static_cast<c10::DeviceIndex>(index));
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_mem_get_info", [](int index) {
    HANDLE_TH_ERRORS
    return device_allocator().getMemoryInfo(static_cast<c10::DeviceIndex>(index));
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_set_memory_fraction", [](int index, double fraction) {
    HANDLE_TH_ERRORS
    set_memory_fraction(index, fraction);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_memory_fraction", [](int index) {
    HANDLE_TH_ERRORS
    return memory_fraction(index);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_mempool_create", [](int index) {
    HANDLE_TH_ERRORS
    return create_mem_pool(index);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_mempool_reserve", [](uint64_t pool, uint64_t bytes) {
    HANDLE_TH_ERRORS
    py::gil_scoped_release no_gil;
    reserve_mem_pool(pool, bytes);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_mempool_release", [](uint64_t pool) { release_mem_pool(pool); });
  m.def("_mempool_empty_cache", [](uint64_t pool) {
    HANDLE_TH_ERRORS
    device_allocator().emptyCache({0, pool});
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_mempool_begin", [](uint64_t pool) {
    HANDLE_TH_ERRORS
    begin_mem_pool(pool);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_mempool_end", [](uint64_t pool) {
    HANDLE_TH_ERRORS
    end_mem_pool(pool);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def(
      "_time_alloc_free",
      [](int index, uint64_t bytes, int batches, int per_batch, bool driver_path, int background) {
        HANDLE_TH_ERRORS
        py::gil_scoped_release no_gil;
        return time_alloc_free(index, bytes, batches, per_batch, driver_path, background);
        END_HANDLE_TH_ERRORS_PYBIND
      },
      py::arg("index"), py::arg("bytes"), py::arg("batches"), py::arg("per_batch"), py::arg("driver_path"),
      py::arg("background") = 0);
}

}  // namespace spyre::backend
