#include "spyre/driver/transport.h"

#include <sys/mman.h>

#include <map>
#include <mutex>

#include <fmt/format.h>

namespace spyre::driver {

Status open_socket_transport(std::unique_ptr<Transport>* out);  // transport_socket.cpp

namespace {

std::mutex g_openers_mu;

std::map<std::string, TransportOpener>& openers() {
  static std::map<std::string, TransportOpener> m;
  return m;
}

}  // namespace

void register_transport(const std::string& kind, TransportOpener open) {
  std::lock_guard lock(g_openers_mu);
  openers()[kind] = open;
}

Status Transport::alloc_host(uint64_t len, void** host) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return {StatusCode::kOutOfMemory, fmt::format("transport: cannot allocate {} bytes of host DMA memory", len)};
  }
  // Large DMA buffers (tensor staging) in huge pages where the kernel offers them: one fault per
  // 2 MiB instead of one per 4 KiB when the buffer is first touched. Only advice: no error if not.
  if (len >= (uint64_t{2} << 20)) (void)madvise(p, len, MADV_HUGEPAGE);
  *host = p;
  return {};
}

void Transport::free_host(void* host, uint64_t len) {
  munmap(host, len);
}

namespace {
Status no_sharing(const char* transport) {
  return {StatusCode::kNotAvailable, std::string("transport ") + transport +
                                         ": its cards serve this process alone; memory is shared between processes "
                                         "through spyre-simd (SPYRE_TRANSPORT=socket)"};
}
}  // namespace

Status Transport::ipc_export(uint32_t /*dev*/, uint64_t /*addr*/, uint64_t /*len*/, uint64_t* /*handle*/) {
  return no_sharing(name());
}

Status Transport::ipc_open(uint32_t /*dev*/, uint64_t /*handle*/, IpcWindow* /*out*/) {
  return no_sharing(name());
}

Status open_transport(const std::string& kind, std::unique_ptr<Transport>* out) {
  const std::string k = kind.empty() ? "inproc" : kind;
  TransportOpener open = nullptr;
  {
    std::lock_guard lock(g_openers_mu);
    if (auto it = openers().find(k); it != openers().end()) open = it->second;
  }
  if (open) return open(out);
  if (k == "socket") return open_socket_transport(out);
  if (k == "inproc") {
    return {StatusCode::kNotAvailable,
            "transport: 'inproc' is not linked into this program (link spyre_sim_inproc and call "
            "spyre::sim::register_inproc_transport() first), or use SPYRE_TRANSPORT=socket"};
  }
  if (k == "vfio") {
    return {StatusCode::kNotAvailable, "transport: 'vfio' needs a Spyre card bound to vfio-pci; none on this host"};
  }
  return {StatusCode::kInvalidArgument,
          fmt::format("transport: unknown kind '{}' (expected inproc, socket or vfio)", k)};
}

}  // namespace spyre::driver
