#include "daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "spyre/common/log.h"
#include "spyre/hw/regs.h"
#include "spyre/sim/iova_map.h"
#include "spyre/simd/channel.h"

namespace spyre::simd {

namespace {
// Error numbers of error replies: the driver's StatusCode values.
constexpr uint32_t kInvalidArgument = 1;
constexpr uint32_t kOutOfMemory = 2;
constexpr uint32_t kNotAvailable = 4;
constexpr uint64_t kPage = 4096;
// A client's IOVAs: its id above bit 44, so one client's addresses never name another's mapping.
constexpr int kClientShift = 44;
}  // namespace

// One card's IOMMU and interrupt lines, for every client: a mapping is a client's memfd, mapped
// here; an MSI-X goes to every client's eventfd (each driver checks its own fences).
class Daemon::CardLink final : public sim::HostLink {
 public:
  std::string map(uint32_t client, int fd, uint64_t bytes, uint64_t offset, uint64_t* iova) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) return std::string("cannot map the client's memory: ") + std::strerror(errno);
    std::lock_guard lock(mu_);
    uint64_t& next = next_[client];
    if (next == 0) next = kPage;
    *iova = (uint64_t{client} << kClientShift) + next;
    next += bytes + kPage;  // a guard page between mappings
    regions_.insert(*iova, {static_cast<uint8_t*>(p), bytes, client});
    return "";
  }
  bool unmap(uint32_t client, uint64_t iova) {
    std::lock_guard lock(mu_);
    uint64_t off = 0;
    const Region* r = regions_.find(iova, 1, &off);
    if (!r || off != 0 || r->client != client) return false;
    munmap(r->host, r->len);
    regions_.erase(iova);
    return true;
  }
  void set_irq(uint32_t client, int fd) {
    std::lock_guard lock(mu_);
    if (auto it = irqs_.find(client); it != irqs_.end()) close(it->second);
    irqs_[client] = fd;
  }
  void drop(uint32_t client) {
    std::lock_guard lock(mu_);
    auto& all = regions_.all();
    for (auto it = all.begin(); it != all.end();) {
      if (it->second.client == client) {
        munmap(it->second.host, it->second.len);
        it = all.erase(it);
      } else {
        ++it;
      }
    }
    if (auto it = irqs_.find(client); it != irqs_.end()) {
      close(it->second);
      irqs_.erase(it);
    }
    next_.erase(client);
  }

  bool dma_read(uint64_t iova, void* dst, uint64_t n) override {
    std::lock_guard lock(mu_);
    uint64_t off = 0;
    const Region* r = regions_.find(iova, n, &off);
    if (!r) return false;
    std::memcpy(dst, r->host + off, n);
    return true;
  }
  bool dma_write(uint64_t iova, const void* src, uint64_t n) override {
    std::lock_guard lock(mu_);
    uint64_t off = 0;
    const Region* r = regions_.find(iova, n, &off);
    if (!r) return false;
    sim::store_dma_write(r->host + off, src, n);
    return true;
  }
  void raise_irq(uint32_t /*vector*/) override {
    std::lock_guard lock(mu_);
    const uint64_t one = 1;
    for (const auto& [client, fd] : irqs_) (void)!write(fd, &one, sizeof one);
  }

 private:
  struct Region {
    uint8_t* host;
    uint64_t len;
    uint32_t client;
  };

  std::mutex mu_;
  sim::IovaMap<Region> regions_;
  std::map<uint32_t, uint64_t> next_;
  std::map<uint32_t, int> irqs_;
};

Daemon::Daemon(sim::Simulator& sim, std::string socket_path, std::chrono::milliseconds idle_exit)
    : sim_(sim),
      path_(std::move(socket_path)),
      idle_exit_(idle_exit),
      config_hash_(std::stoull(sim.config().hash(), nullptr, 16)) {
  for (uint32_t c = 0; c < sim_.num_cards(); ++c) {
    links_.push_back(std::make_unique<CardLink>());
    sim_.attach(c, links_.back().get());
  }
}

Daemon::~Daemon() {
  for (uint32_t c = 0; c < links_.size(); ++c) sim_.attach(c, nullptr);
}

int Daemon::run() {
  // One daemon per socket path: the lock file decides between daemons started at once.
  const std::string lock_path = path_ + ".lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) != 0) {
    log("simd").info("another spyre-simd serves {}", path_);
    return 0;
  }
  const int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof addr.sun_path) {
    log("simd").error("socket path too long: {}", path_);
    return 1;
  }
  std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
  unlink(path_.c_str());  // a stale socket of a daemon that died (we hold the lock)
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 16) != 0) {
    log("simd").error("cannot listen on {}: {}", path_, std::strerror(errno));
    return 1;
  }
  log("simd").info("serving {} card(s) on {}", sim_.num_cards(), path_);
  last_seen_ = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  while (!stopping_) {
    pollfd p{listener, POLLIN, 0};
    const int ready = poll(&p, 1, 200);
    if (ready > 0) {
      const int sock = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (sock >= 0) {
        std::lock_guard lock_clients(mu_);
        const uint32_t client = next_client_++;
        ++clients_;
        threads.emplace_back([this, sock, client] { serve(sock, client); });
      }
    }
    std::lock_guard lock_clients(mu_);
    if (clients_ == 0 && idle_exit_.count() > 0 && std::chrono::steady_clock::now() - last_seen_ > idle_exit_) {
      log("simd").info("no client for {} ms: exiting", idle_exit_.count());
      break;
    }
  }
  unlink(path_.c_str());
  close(listener);
  for (std::thread& t : threads) t.join();
  close(lock);
  return 0;
}

void Daemon::serve(int sock, uint32_t client) {
  log("simd").info("client {} connected", client);
  std::set<std::pair<uint32_t, uint32_t>> queues;  // (card, queue) whose registers it wrote
  std::set<uint64_t> waits;                        // host-pacing tokens of its unfinished waits
  bool admitted = false;                           // its hello was accepted
  const uint32_t cards = sim_.num_cards();
  for (;;) {
    Message m;
    std::vector<int> fds;
    const std::string why = recv_message(sock, &m, &fds);
    if (why == "closed") break;
    if (!why.empty()) {  // a client that breaks the protocol is cut off; the others go on
      log("simd").warn("client {}: {}; disconnecting it", client, why);
      break;
    }
    Message reply;
    reply.command = m.command;
    reply.id = m.id;
    reply.flags = kFlagReply;
    const auto fail = [&](uint32_t code, std::string text) {
      reply.flags |= kFlagError;
      reply.error = code;
      reply.text = std::move(text);
    };
    const uint64_t a = m.args[0], b = m.args[1], c = m.args[2], d = m.args[3];
    const bool names_card =
        m.command != Command::kHello && m.command != Command::kWaitEnd && m.command != Command::kReports;
    if (!admitted && m.command != Command::kHello) {
      fail(kNotAvailable, "spyre-simd: say hello first");
      for (int fd : fds) close(fd);
    } else if (names_card && a >= cards) {
      fail(kInvalidArgument, "spyre-simd: no card " + std::to_string(a));
      for (int fd : fds) close(fd);
    } else {
      const auto card = static_cast<uint32_t>(a);
      switch (m.command) {
        case Command::kHello:
          if (a != kProtocolVersion) {
            fail(kNotAvailable, "spyre-simd: protocol version " + std::to_string(a) + " is not " +
                                    std::to_string(kProtocolVersion) + "; use a driver and daemon of one build");
          } else if (c != config_hash_) {
            fail(kNotAvailable, fmt::format("spyre-simd on {} simulates config {:016x}, and this process asks for "
                                            "{:016x} ($SPYRE_CONFIG): stop that daemon, or give this config its own "
                                            "socket with $SPYRE_SIMD_SOCKET",
                                            path_, config_hash_, c));
          } else if (!admit(client, b)) {
            // Until queues and memory are partitioned between clients (docs/design-daemon.md,
            // step 4), two drivers on one card would take the same queues and memory.
            std::lock_guard lock(mu_);
            fail(kNotAvailable,
                 fmt::format("spyre-simd on {}: its card is in use by pid {}; sharing a card between "
                             "processes is not supported yet (use another $SPYRE_SIMD_SOCKET, or inproc)",
                             path_, holder_pid_));
          } else {
            admitted = true;
            reply.args[0] = kProtocolVersion;
            reply.args[1] = cards;
            reply.args[2] = client;
            log("simd").info("client {} is pid {}", client, b);
          }
          break;
        case Command::kCfgRead:
          reply.args[0] = sim_.cfg_read(card, static_cast<uint32_t>(b), static_cast<uint32_t>(c));
          break;
        case Command::kCfgWrite:
          sim_.cfg_write(card, static_cast<uint32_t>(b), static_cast<uint32_t>(c), static_cast<uint32_t>(d));
          break;
        case Command::kMmioRead:
          reply.args[0] = sim_.mmio_read(card, static_cast<uint32_t>(b));
          break;
        case Command::kMmioWrite:
          if (b >= hw::kQueueBase)
            queues.insert({card, static_cast<uint32_t>((b - hw::kQueueBase) / hw::kQueueStride)});
          sim_.mmio_write(card, static_cast<uint32_t>(b), static_cast<uint32_t>(c));
          break;
        case Command::kDmaMap: {
          uint64_t iova = 0;
          const std::string err = links_[card]->map(client, fds[0], b, c, &iova);
          close(fds[0]);
          if (!err.empty()) {
            fail(kOutOfMemory, "spyre-simd: " + err);
          } else {
            reply.args[0] = iova;
          }
          break;
        }
        case Command::kDmaUnmap:
          if (!links_[card]->unmap(client, b)) fail(kInvalidArgument, "spyre-simd: iommu: no mapping of yours there");
          break;
        case Command::kIrqSet:
          links_[card]->set_irq(client, fds[0]);
          break;
        case Command::kWaitBegin:
          reply.args[0] = sim_.wait_begin(card, static_cast<uint32_t>(b), c);
          if (reply.args[0] != 0) waits.insert(reply.args[0]);
          break;
        case Command::kWaitEnd:
          if (waits.erase(a) == 1) sim_.wait_end(a, b != 0);
          break;
        case Command::kPoll:
          sim_.note_poll();
          break;
        case Command::kReports: {
          try {
            const sim::Reports r = sim_.flush_reports();
            reply.text = r.trace_path + "\n" + r.stats_path;
          } catch (const std::exception& e) {
            fail(kNotAvailable, e.what());
          }
          break;
        }
        case Command::kCount:
          break;
      }
    }
    if (m.flags & kFlagNoReply) continue;
    if (const std::string err = send_message(sock, reply); !err.empty()) break;
  }
  close(sock);
  for (const uint64_t token : waits) sim_.wait_end(token, false);  // it waits no more
  // What the client left behind: its queues stop (a reset drops what they hold), then its memory
  // goes, so no DMA lands in memory it no longer has.
  for (const auto& [card, q] : queues) {
    if (q < hw::kMaxQueues) sim_.mmio_write(card, hw::queue_reg(q, hw::kQControl), hw::kQControlReset);
  }
  for (uint32_t c = 0; c < cards; ++c) (void)sim_.mmio_read(c, hw::kRegMagic);  // the resets have landed
  drop_client(client);
  log("simd").info("client {} gone", client);
}

bool Daemon::admit(uint32_t client, uint64_t pid) {
  std::lock_guard lock(mu_);
  if (holder_ != 0 && holder_ != client) return false;
  holder_ = client;
  holder_pid_ = pid;
  return true;
}

void Daemon::drop_client(uint32_t client) {
  for (auto& link : links_) link->drop(client);
  std::lock_guard lock(mu_);
  if (holder_ == client) holder_ = 0;
  --clients_;
  last_seen_ = std::chrono::steady_clock::now();
}

}  // namespace spyre::simd
