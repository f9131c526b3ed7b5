#include "spyre/driver/transport.h"

#include <sys/mman.h>

#include <fmt/format.h>

namespace spyre::driver {

Status open_inproc_transport(std::unique_ptr<Transport>* out);  // transport_inproc.cpp
Status open_socket_transport(std::unique_ptr<Transport>* out);  // transport_socket.cpp

Status Transport::alloc_host(uint64_t len, void** host) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return {StatusCode::kOutOfMemory, fmt::format("transport: cannot allocate {} bytes of host DMA memory", len)};
  }
  *host = p;
  return {};
}

void Transport::free_host(void* host, uint64_t len) {
  munmap(host, len);
}

Status open_transport(const std::string& kind, std::unique_ptr<Transport>* out) {
  if (kind.empty() || kind == "inproc") return open_inproc_transport(out);
  if (kind == "socket") return open_socket_transport(out);
  if (kind == "vfio") {
    return {StatusCode::kNotAvailable, "transport: 'vfio' needs a Spyre card bound to vfio-pci; none on this host"};
  }
  return {StatusCode::kInvalidArgument,
          fmt::format("transport: unknown kind '{}' (expected inproc, socket or vfio)", kind)};
}

}  // namespace spyre::driver
