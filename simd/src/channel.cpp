#include "spyre/simd/channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace spyre::simd {

namespace {
constexpr size_t kMaxFds = 4;
}

std::string default_socket_path(uint64_t config_hash) {
  if (const char* p = std::getenv("SPYRE_SIMD_SOCKET"); p && *p) return p;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(config_hash));
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d && *d) return std::string(d) + "/spyre-simd-" + hash + ".sock";
  return "/tmp/spyre-simd-" + std::to_string(getuid()) + "-" + hash + ".sock";
}

std::string send_message(int sock, const Message& m, const std::vector<int>& fds) {
  if (fds.size() > kMaxFds) return "send: too many file descriptors";
  const std::vector<uint8_t> bytes = encode(m);
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) return "";
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? std::string("send: ") + std::strerror(errno) : "send: short write";
  }
}

std::string recv_message(int sock, Message* m, std::vector<int>* fds) {
  thread_local std::vector<uint8_t> buf(sizeof(Header) + kArgsBytes + kMaxText + 1);
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return "closed";
  if (n < 0) return std::string("recv: ") + std::strerror(errno);
  const size_t first = fds->size();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds->push_back(fd);
    }
  }
  std::string why;
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    why = "recv: message or its descriptors truncated";
  } else {
    why = decode(buf.data(), static_cast<size_t>(n), fds->size() - first, m);
  }
  if (!why.empty()) {
    for (size_t i = first; i < fds->size(); ++i) close((*fds)[i]);
    fds->resize(first);
  }
  return why;
}

}  // namespace spyre::simd
