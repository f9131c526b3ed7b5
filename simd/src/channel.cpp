#include "spyre/simd/channel.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace spyre::simd {

namespace {
constexpr size_t kMaxFds = 4;
}

std::string read_config_source(ConfigSource* out) {
  *out = ConfigSource{};
  if (const char* path = std::getenv("SPYRE_CONFIG"); path && *path) {
    std::ifstream in(path);
    if (!in) return std::string("config: cannot read SPYRE_CONFIG file '") + path + "'";
    std::stringstream read;
    read << in.rdbuf();
    out->origin = path;
    out->text = read.str();
  }
  if (const char* faults = std::getenv("SPYRE_FAULTS"); faults && *faults) out->faults = faults;
  return "";
}

std::string encode_config_source(const ConfigSource& source) {
  std::string t = source.origin;
  t += '\0';
  t += source.text;
  t += '\0';
  t += source.faults;
  return t;
}

bool decode_config_source(const std::string& text, ConfigSource* out) {
  const size_t a = text.find('\0');
  const size_t b = a == std::string::npos ? a : text.find('\0', a + 1);
  if (b == std::string::npos || text.find('\0', b + 1) != std::string::npos) return false;
  *out = ConfigSource{text.substr(0, a), text.substr(a + 1, b - a - 1), text.substr(b + 1)};
  return true;
}

uint64_t config_digest(const ConfigSource& source) {
  // The origin is only a name: two files of one text ask for one config.
  uint64_t h = 0xcbf29ce484222325ull;
  const auto byte = [&h](uint64_t b) { h = (h ^ (b & 0xffu)) * 0x100000001b3ull; };
  const auto mix = [&byte](const std::string& s) {  // length first: no two pairs of texts run together
    for (int i = 0; i < 64; i += 8) byte(s.size() >> i);
    for (const char ch : s) byte(static_cast<uint8_t>(ch));
  };
  mix(source.text);
  mix(source.faults);
  return h;
}

std::string default_socket_path(uint64_t digest) {
  if (const char* p = std::getenv("SPYRE_SIMD_SOCKET"); p && *p) return p;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(digest));
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

int connect_socket(const std::string& path) {
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(sock);
    return -1;
  }
  return sock;
}

std::string query_status(std::string path, std::string* json) {
  if (path.empty()) {
    ConfigSource source;
    if (std::string why = read_config_source(&source); !why.empty()) return why;
    path = default_socket_path(config_digest(source));
  }
  const int sock = connect_socket(path);
  if (sock < 0) return "no spyre-simd answers on " + path;
  Message m;
  m.command = Command::kStatus;
  m.id = 1;
  Message reply;
  std::vector<int> fds;
  std::string err = send_message(sock, m);
  if (err.empty()) err = recv_message(sock, &reply, &fds);
  for (int fd : fds) close(fd);
  close(sock);
  if (!err.empty()) return "spyre-simd on " + path + ": " + err;
  if (reply.flags & kFlagError) return reply.text;
  *json = reply.text;
  return "";
}

}  // namespace spyre::simd
