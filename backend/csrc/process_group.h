// The c10d backend "spyre" (torch.distributed): collectives over spyre tensors. See
// process_group.cpp and docs/user-guide.md, "Distributed".
#pragma once

#include <pybind11/pybind11.h>

namespace spyre::backend {

/// Binds `_C._process_group(rank, size, host)`, the backend's constructor.
void bind_process_group(pybind11::module_& m);

}  // namespace spyre::backend
