// The "socket" transport: the cards live in spyre-simd, another process, reached over a Unix
// socket with the messages of spyre/simd/protocol.h. Host DMA memory is memfd-backed so that the
// daemon can map it; interrupts arrive on an eventfd per card. When no daemon answers, the first
// client starts one (spyre-simd --auto), which exits when it has been idle a while.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "spyre/common/log.h"
#include "spyre/driver/transport.h"
#include "spyre/simd/channel.h"

extern char** environ;

namespace spyre::driver {
namespace {

using simd::Command;
using simd::Message;

#ifndef SPYRE_SIMD_DEFAULT_PATH
#define SPYRE_SIMD_DEFAULT_PATH ""
#endif

// The spyre-simd packaged with the library or program that holds this driver, or "". An installed
// wheel has torch_spyre/_C.so with the programs in torch_spyre/bin/ (so spyre-sim has spyre-simd
// beside it); a checkout links the same names there (CMakeLists.txt, spyre_package_program).
std::string packaged_daemon() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&packaged_daemon), &info) == 0 || info.dli_fname == nullptr) return {};
  // A shared library's path as loaded; for the main program dladdr gives its argv[0], which may
  // be a bare name found on the PATH, so that one comes from /proc.
  const bool named = std::strchr(info.dli_fname, '/') != nullptr;
  char* resolved = realpath(named ? info.dli_fname : "/proc/self/exe", nullptr);
  if (resolved == nullptr) return {};
  const std::string self = resolved;
  std::free(resolved);
  const std::string dir = self.substr(0, self.rfind('/'));
  for (const std::string& candidate : {dir + "/bin/spyre-simd", dir + "/spyre-simd"}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// The daemon binary: $SPYRE_SIMD; else the one its own build tree made (a checkout's build, so a
// sanitizer build's driver starts that build's daemon); else the packaged one (an installed wheel,
// which names no build tree); else spyre-simd on the PATH.
std::string daemon_binary() {
  if (const char* p = std::getenv("SPYRE_SIMD"); p && *p) return p;
  if (access(SPYRE_SIMD_DEFAULT_PATH, X_OK) == 0) return SPYRE_SIMD_DEFAULT_PATH;
  if (std::string packaged = packaged_daemon(); !packaged.empty()) return packaged;
  return "spyre-simd";
}

// Starts spyre-simd on `path`; its pid in `pid`.
Status start_daemon(const std::string& path, pid_t* pid_out) {
  const std::string bin = daemon_binary();
  std::vector<std::string> args = {bin, "--auto", "--socket", path};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Its own session, so that the client's Ctrl-C does not reach it; it outlives the client, so it
  // must not hold the client's stdout and stderr open (a parent reading them would wait for it):
  // it logs to the socket path + ".log".
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  const std::string log_path = path + ".log";
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, bin.c_str(), &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return {StatusCode::kNotAvailable,
            fmt::format("transport socket: no daemon on {}, and cannot start '{}' ({}); set SPYRE_SIMD to the "
                        "spyre-simd binary or start it by hand",
                        path, bin, std::strerror(rc))};
  }
  *pid_out = pid;
  return {};
}

// The last line the daemon wrote to its log: why it stopped at its start.
std::string last_log_line(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.empty() ? "no message" : last;
}

// Connects to the daemon on `path`, starting one when none answers. A daemon that stops before it
// answers (a config it refuses, say) is reported with its last words rather than waited for.
Status connect_or_start(const std::string& path, int* sock_out) {
  int sock = simd::connect_socket(path);
  if (sock >= 0) {
    *sock_out = sock;
    return {};
  }
  pid_t pid = 0;
  if (Status s = start_daemon(path, &pid); !s.ok()) return s;
  bool exited = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (sock < 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sock = simd::connect_socket(path);
    int status = 0;
    if (sock < 0 && !exited && waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      // Exit 0: another process's daemon holds the socket's lock and ours gave way; that one may
      // still be starting, so keep trying. Anything else: ours failed, and its log says why.
      const bool gave_way = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      sock = simd::connect_socket(path);
      if (sock < 0 && !gave_way) {
        return {StatusCode::kNotAvailable,
                fmt::format("transport socket: spyre-simd stopped at its start: {}", last_log_line(path + ".log"))};
      }
    }
  }
  // It is reaped by whoever it outlives; not waiting here keeps it running.
  if (!exited) std::thread([pid] { waitpid(pid, nullptr, 0); }).detach();
  if (sock < 0) {
    return {StatusCode::kNotAvailable,
            fmt::format("transport socket: started spyre-simd, but nothing answers on {} after 30 s", path)};
  }
  *sock_out = sock;
  return {};
}

class SocketTransport final : public Transport {
 public:
  ~SocketTransport() override {
    if (forked()) return;  // a forked child's copy: the connection, threads and lines are the parent's
    stopping_ = true;
    for (auto& [dev, irq] : irqs_) {
      const uint64_t one = 1;
      (void)!write(irq.fd, &one, sizeof one);  // wake its thread
    }
    for (auto& [dev, irq] : irqs_) {
      irq.thread.join();
      close(irq.fd);
    }
    if (sock_ >= 0) close(sock_);
  }

  Status open() {
    // The daemon simulates one config: the one this process asks for, or it says no. The driver
    // does not read configs: it sends the source, and the daemon answers with the config's hash.
    simd::ConfigSource source;
    if (std::string why = simd::read_config_source(&source); !why.empty()) {
      return {StatusCode::kNotAvailable, "transport socket: " + why};
    }
    const std::string text = simd::encode_config_source(source);
    if (text.size() > simd::kMaxText) {
      return {StatusCode::kNotAvailable, fmt::format("transport socket: the config ({} bytes) is larger than a "
                                                     "message carries ({} bytes)",
                                                     text.size(), simd::kMaxText)};
    }
    const uint64_t digest = simd::config_digest(source);
    if (Status s = connect_or_start(simd::default_socket_path(digest), &sock_); !s.ok()) return s;
    Message hello = request(Command::kHello, simd::kProtocolVersion, static_cast<uint64_t>(getpid()), digest);
    hello.text = text;
    Message reply;
    if (Status s = call(hello, &reply); !s.ok()) return s;
    log("driver").debug("transport socket: spyre-simd simulates config {:016x}", reply.args[3]);
    for (const char* key : {"SPYRE_STATS", "SPYRE_TRACE", "SPYRE_CAPTURE"}) {
      if (const char* v = std::getenv(key); v && *v) {
        log("driver").warn(
            "transport socket: ${} is not this process's: the card is spyre-simd's, shared with other processes, "
            "and its reports are the daemon's (written where the daemon was told); measure one process with "
            "SPYRE_TRANSPORT=inproc",
            key);
      }
    }
    cards_ = static_cast<uint32_t>(reply.args[1]);
    return {};
  }

  const char* name() const override { return "socket"; }
  uint32_t device_count() const override { return cards_; }
  Status open(uint32_t dev) override {
    Message reply;
    return call(request(Command::kOpen, dev), &reply);
  }

  uint32_t cfg_read(uint32_t dev, uint32_t offset, uint32_t size) override {
    Message reply;
    if (!call(request(Command::kCfgRead, dev, offset, size), &reply).ok()) return 0xffffffffu;
    return static_cast<uint32_t>(reply.args[0]);
  }
  void cfg_write(uint32_t dev, uint32_t offset, uint32_t size, uint32_t value) override {
    Message reply;
    (void)call(request(Command::kCfgWrite, dev, offset, size, value), &reply);
  }
  uint32_t mmio_read(uint32_t dev, uint32_t offset) override {
    Message reply;
    if (!call(request(Command::kMmioRead, dev, offset), &reply).ok()) return 0xffffffffu;  // as a lost card
    return static_cast<uint32_t>(reply.args[0]);
  }
  void mmio_write(uint32_t dev, uint32_t offset, uint32_t value) override {
    if (forked()) return;
    Message m = request(Command::kMmioWrite, dev, offset, value);
    m.flags = simd::kFlagNoReply;  // posted
    std::lock_guard lock(mu_);
    m.id = next_id_++;
    (void)simd::send_message(sock_, m);
  }

  Status alloc_host(uint64_t len, void** host) override {
    const int fd = memfd_create("spyre-dma", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(len)) != 0) {
      if (fd >= 0) close(fd);
      return {StatusCode::kOutOfMemory, fmt::format("transport socket: cannot allocate {} bytes of shared host "
                                                    "memory ({})",
                                                    len, std::strerror(errno))};
    }
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return {StatusCode::kOutOfMemory, fmt::format("transport socket: cannot map {} bytes of shared memory", len)};
    }
    std::lock_guard lock(mem_mu_);
    memfds_[reinterpret_cast<uintptr_t>(p)] = {fd, len};
    *host = p;
    return {};
  }
  void free_host(void* host, uint64_t len) override {
    munmap(host, len);
    std::lock_guard lock(mem_mu_);
    auto it = memfds_.find(reinterpret_cast<uintptr_t>(host));
    if (it == memfds_.end()) return;
    close(it->second.fd);
    memfds_.erase(it);
  }

  Status dma_map(uint32_t dev, void* host, uint64_t len, uint64_t* iova) override {
    int fd = -1;
    uint64_t offset = 0;
    {
      std::lock_guard lock(mem_mu_);
      const auto at = reinterpret_cast<uintptr_t>(host);
      auto it = memfds_.upper_bound(at);
      if (it != memfds_.begin()) {
        --it;
        if (at - it->first + len <= it->second.len) {
          fd = it->second.fd;
          offset = at - it->first;
        }
      }
    }
    if (fd < 0) {
      return {StatusCode::kInvalidArgument,
              "transport socket: only memory from alloc_host can be mapped for the card (the daemon must reach it)"};
    }
    Message reply;
    if (Status s = call(request(Command::kDmaMap, dev, len, offset), &reply, {fd}); !s.ok()) return s;
    *iova = reply.args[0];
    return {};
  }
  Status dma_map_peer(uint32_t dev, uint32_t peer, uint64_t offset, uint64_t len, uint64_t* iova) override {
    Message reply;
    if (Status s = call(request(Command::kDmaMapPeer, dev, peer, offset, len), &reply); !s.ok()) return s;
    *iova = reply.args[0];
    return {};
  }
  Status ipc_export(uint32_t dev, uint64_t addr, uint64_t len, uint64_t* handle) override {
    Message reply;
    if (Status s = call(request(Command::kIpcExport, dev, addr, len), &reply); !s.ok()) return s;
    *handle = reply.args[0];
    return {};
  }
  Status ipc_open(uint32_t dev, uint64_t handle, IpcWindow* out) override {
    Message reply;
    if (Status s = call(request(Command::kIpcOpen, dev, handle), &reply); !s.ok()) return s;
    *out = {reply.args[0], static_cast<uint32_t>(reply.args[1]), reply.args[2], reply.args[3]};
    return {};
  }
  Status dma_unmap(uint32_t dev, uint64_t iova) override {
    Message reply;
    return call(request(Command::kDmaUnmap, dev, iova), &reply);
  }

  void set_irq_handler(uint32_t dev, std::function<void(uint32_t)> handler) override {
    auto h = std::make_shared<std::function<void(uint32_t)>>(std::move(handler));
    std::lock_guard lock(irq_mu_);
    if (auto it = irqs_.find(dev); it != irqs_.end()) {  // a device opened again: a new handler, same line
      it->second.handler = h;
      return;
    }
    const int fd = eventfd(0, EFD_CLOEXEC);
    Message reply;
    if (fd < 0 || !call(request(Command::kIrqSet, dev), &reply, {fd}).ok()) {
      if (fd >= 0) close(fd);
      return;  // no interrupts: waiters still see their fences after their poll interval
    }
    Irq& irq = irqs_[dev];
    irq.fd = fd;
    irq.handler = h;
    irq.thread = std::thread([this, fd, dev] {
      uint64_t count;
      while (read(fd, &count, sizeof count) == sizeof count && !stopping_) {
        std::shared_ptr<std::function<void(uint32_t)>> current;
        {
          std::lock_guard lock(irq_mu_);
          current = irqs_[dev].handler;
        }
        if (current && *current) (*current)(0);
      }
    });
  }

  Status write_sim_reports(std::string* trace_path, std::string* stats_path) override {
    Message reply;
    if (Status s = call(request(Command::kReports), &reply); !s.ok()) return s;
    const size_t nl = reply.text.find('\n');
    *trace_path = reply.text.substr(0, nl);
    *stats_path = nl == std::string::npos ? "" : reply.text.substr(nl + 1);
    return {};
  }

  uint64_t wait_begin(uint32_t dev, uint32_t queue, uint64_t seq) override {
    Message reply;
    if (!call(request(Command::kWaitBegin, dev, queue, seq), &reply).ok()) return 0;
    return reply.args[0];
  }
  void wait_end(uint64_t token, bool ended_by_card) override {
    Message reply;
    (void)call(request(Command::kWaitEnd, token, ended_by_card ? 1 : 0), &reply);
  }
  void note_poll(uint32_t dev) override {
    Message reply;
    (void)call(request(Command::kPoll, dev), &reply);
  }

 private:
  struct Irq {
    int fd = -1;
    std::thread thread;
    std::shared_ptr<std::function<void(uint32_t)>> handler;
  };
  struct Memfd {
    int fd;
    uint64_t len;
  };

  static Message request(Command c, uint64_t a = 0, uint64_t b = 0, uint64_t cc = 0, uint64_t d = 0) {
    Message m;
    m.command = c;
    m.args[0] = a;
    m.args[1] = b;
    m.args[2] = cc;
    m.args[3] = d;
    return m;
  }

  // A child forked after the connection was made shares the parent's socket: a word from it would
  // act on the parent's queues, or take the parent's replies. It gets nothing through.
  bool forked() const { return getpid() != pid_; }

  // One request and its reply; requests from all threads go one at a time, in order.
  Status call(Message m, Message* reply, const std::vector<int>& fds = {}) {
    if (forked()) {
      return {StatusCode::kNotAvailable,
              "transport socket: the connection belongs to the process that forked this one"};
    }
    std::lock_guard lock(mu_);
    m.id = next_id_++;
    if (std::string err = simd::send_message(sock_, m, fds); !err.empty()) {
      return {StatusCode::kNotAvailable, "transport socket: the daemon is gone (" + err + ")"};
    }
    std::vector<int> got;
    for (;;) {
      const std::string err = simd::recv_message(sock_, reply, &got);
      for (int fd : got) close(fd);
      got.clear();
      if (!err.empty()) return {StatusCode::kNotAvailable, "transport socket: the daemon is gone (" + err + ")"};
      if (reply->is_reply() && reply->id == m.id) break;
    }
    if (reply->flags & simd::kFlagError) return {static_cast<StatusCode>(reply->error), reply->text};
    return {};
  }

  int sock_ = -1;
  pid_t pid_ = getpid();
  uint32_t cards_ = 0;
  std::mutex mu_;  // one request at a time
  uint32_t next_id_ = 1;
  std::mutex mem_mu_;
  std::map<uintptr_t, Memfd> memfds_;
  std::mutex irq_mu_;
  std::map<uint32_t, Irq> irqs_;
  std::atomic<bool> stopping_{false};
};

}  // namespace

Status open_socket_transport(std::unique_ptr<Transport>* out) {
  auto t = std::make_unique<SocketTransport>();
  if (Status s = t->open(); !s.ok()) return s;
  *out = std::move(t);
  return {};
}

}  // namespace spyre::driver
