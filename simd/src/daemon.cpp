#include "daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "spyre/common/log.h"
#include "spyre/hw/errors.h"
#include "spyre/hw/pci.h"
#include "spyre/hw/regs.h"
#include "spyre/simd/channel.h"

namespace spyre::simd {

namespace {

// The digest of this process's own config source (the daemon's $SPYRE_CONFIG and $SPYRE_FAULTS).
uint64_t own_source_digest() {
  simd::ConfigSource source;
  return simd::read_config_source(&source).empty() ? simd::config_digest(source) : 0;
}

// Error numbers of error replies: the driver's StatusCode values.
constexpr uint32_t kInvalidArgument = 1;
constexpr uint32_t kOutOfMemory = 2;
constexpr uint32_t kNotAvailable = 4;
constexpr uint32_t kMaxClientId = uint32_t{1} << 19;
constexpr uint64_t kWindowAlign = uint64_t{1} << 20;
constexpr uint32_t kAllOnes = 0xffffffffu;

void write64(sim::Simulator& sim, uint32_t card, uint32_t lo, uint64_t v) {
  sim.mmio_write(card, lo, static_cast<uint32_t>(v));
  sim.mmio_write(card, lo + 4, static_cast<uint32_t>(v >> 32));
}
}  // namespace

std::string Daemon::config_refusal(uint64_t digest, const std::string& text) const {
  simd::ConfigSource source;
  if (!simd::decode_config_source(text, &source)) return "spyre-simd: hello.text: not a config source";
  if (digest != simd::config_digest(source)) return "spyre-simd: hello.config_digest: not its text's digest";
  if (digest == source_digest_) return "";  // the same text as this daemon's: the same config
  uint64_t asked = 0;
  try {
    asked = std::stoull(sim::load_config(source.text, source.faults, source.origin).hash(), nullptr, 16);
  } catch (const std::invalid_argument& e) {
    return fmt::format("spyre-simd on {}: this process's config is refused: {}", path_, e.what());
  }
  if (asked == config_hash_) return "";
  return fmt::format(
      "spyre-simd on {} simulates config {:016x}, and this process asks for {:016x} ($SPYRE_CONFIG): "
      "stop that daemon, or give this config its own socket with $SPYRE_SIMD_SOCKET",
      path_, config_hash_, asked);
}

Daemon::Daemon(sim::Simulator& sim, std::string socket_path, std::chrono::milliseconds idle_exit, uint32_t slots)
    : sim_(sim),
      path_(std::move(socket_path)),
      idle_exit_(idle_exit),
      config_hash_(std::stoull(sim.config().hash(), nullptr, 16)),
      source_digest_(own_source_digest()),
      started_(std::chrono::steady_clock::now()) {
  for (uint32_t c = 0; c < sim_.num_cards(); ++c) {
    links_.push_back(std::make_unique<CardLink>());
    sim_.attach(c, links_.back().get());
    // The daemon is the card's owner: it enables it once, and clients' config writes are dropped.
    sim_.cfg_write(c, hw::kCfgCommand, 2, hw::kCmdMemorySpace | hw::kCmdBusMaster);
  }
  // The partition: the cards are alike (one config), so every card is cut the same way.
  const uint32_t queues = std::min(sim_.mmio_read(0, hw::kRegNumQueues), hw::kMaxQueues);
  const uint64_t mem = sim_.mmio_read(0, hw::kRegMemSizeLo) | uint64_t{sim_.mmio_read(0, hw::kRegMemSizeHi)} << 32;
  const uint32_t n = std::max<uint32_t>(1, std::min(slots, queues));
  const uint64_t share = mem / n / kWindowAlign * kWindowAlign;
  std::vector<Slot> card_slots;
  for (uint32_t i = 0; i < n; ++i) {
    Slot s;
    s.first_queue = i * (queues / n);
    s.queues = queues / n;
    s.mem_base = i * share;
    s.mem_bytes = share;
    card_slots.push_back(s);
  }
  slots_.assign(sim_.num_cards(), card_slots);
  log("simd").info("{} slot(s) per card: {} queue(s) and {:.1f} GiB each", n, queues / n,
                   static_cast<double>(share) / (1ull << 30));
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
        // Ids name IOMMU domains (id << 44): they wrap below 2^19 and skip the connected ones, so
        // a long-lived daemon never gives two clients one domain.
        uint32_t client;
        do {
          client = next_client_;
          next_client_ = next_client_ + 1 < kMaxClientId ? next_client_ + 1 : 1;
        } while (connected_.count(client) != 0);
        connected_.insert(client);
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
  std::set<uint64_t> waits;  // host-pacing tokens of its unfinished waits
  bool greeted = false;      // its hello was accepted
  uint64_t pid = 0;
  const uint32_t cards = sim_.num_cards();
  std::vector<int> slot(cards, -1);  // its slot of each card it opened
  std::vector<Slot> mine(cards);
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
    const bool names_card = m.command != Command::kHello && m.command != Command::kWaitEnd &&
                            m.command != Command::kReports && m.command != Command::kStatus;
    const bool needs_hello = m.command != Command::kHello && m.command != Command::kStatus;
    if (!greeted && needs_hello) {
      fail(kNotAvailable, "spyre-simd: say hello first");
      for (int fd : fds) close(fd);
    } else if (names_card && a >= cards) {
      fail(kInvalidArgument, "spyre-simd: no card " + std::to_string(a));
      for (int fd : fds) close(fd);
    } else if (names_card && m.command != Command::kOpen && slot[a] < 0) {
      fail(kNotAvailable,
           fmt::format("spyre-simd: {}: this client has not opened card {}", command_name(m.command), a));
      for (int fd : fds) close(fd);
    } else {
      const auto card = static_cast<uint32_t>(a);
      switch (m.command) {
        case Command::kHello:
          if (greeted) {
            fail(kInvalidArgument, "spyre-simd: hello again");
          } else if (a != kProtocolVersion) {
            fail(kNotAvailable, "spyre-simd: protocol version " + std::to_string(a) + " is not " +
                                    std::to_string(kProtocolVersion) + "; use a driver and daemon of one build");
          } else if (std::string why = config_refusal(c, m.text); !why.empty()) {
            fail(kNotAvailable, why);
          } else {
            greeted = true;
            pid = b;
            reply.args[0] = kProtocolVersion;
            reply.args[1] = cards;
            reply.args[2] = client;
            reply.args[3] = config_hash_;
            log("simd").info("client {} is pid {}", client, b);
          }
          break;
        case Command::kOpen:
          if (slot[card] < 0) {
            slot[card] = admit(client, pid, card);
            if (slot[card] < 0) {
              fail(kNotAvailable, refusal(pid, card));
              break;
            }
            std::lock_guard lock(mu_);
            mine[card] = slots_[card][static_cast<size_t>(slot[card])];
            log("simd").info("client {} opened card {}: slot {}", client, card, slot[card]);
          }
          reply.args[0] = static_cast<uint64_t>(slot[card]);
          break;
        case Command::kCfgRead:
          reply.args[0] = sim_.cfg_read(card, static_cast<uint32_t>(b), static_cast<uint32_t>(c));
          break;
        case Command::kCfgWrite:
          break;  // the card is the daemon's to enable; a client's command register is virtual
        case Command::kMmioRead:
          reply.args[0] = client_read(mine[card], card, static_cast<uint32_t>(b));
          break;
        case Command::kMmioWrite:
          client_write(mine[card], card, static_cast<uint32_t>(b), static_cast<uint32_t>(c));
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
        case Command::kDmaMapPeer:
          // Only the client's own window on the peer card, which it must have opened.
          if (b >= cards) {
            fail(kInvalidArgument, "spyre-simd: no peer card " + std::to_string(b));
          } else if (slot[b] < 0) {
            fail(kInvalidArgument, fmt::format("spyre-simd: iommu: this client has not opened peer card {}; memory "
                                               "of another process's card is reached through its IPC handle",
                                               b));
          } else if (!hw::in_window(c, d, mine[b].mem_base, mine[b].mem_bytes)) {
            fail(kInvalidArgument, fmt::format("spyre-simd: iommu: peer range {:#x} + {} is outside this client's "
                                               "window of card {} ({:#x} + {})",
                                               c, d, b, mine[b].mem_base, mine[b].mem_bytes));
          } else {
            reply.args[0] = links_[card]->map_peer(client, static_cast<uint32_t>(b), c, d);
          }
          break;
        case Command::kIpcExport: {
          std::string why;
          reply.args[0] = ipc_export(client, mine[card], card, b, c, &why);
          if (reply.args[0] == 0) fail(kInvalidArgument, why);
          break;
        }
        case Command::kIpcOpen: {
          // Mapped under the lock: the exporter's release, which forgets its exports under it and
          // then revokes every mapping of them, cannot run between the look-up and the mapping.
          const std::lock_guard lock(mu_);
          const auto it = exports_.find(b);
          const Export e = it != exports_.end() ? it->second : Export{};
          if (e.client == 0) {
            fail(kInvalidArgument, fmt::format("spyre-simd: no shared memory has handle {:#x} (its client may have "
                                               "left, or it came from another daemon)",
                                               b));
          } else if (e.card == card) {
            fail(kInvalidArgument, fmt::format("spyre-simd: the memory of handle {:#x} is on card {} itself; "
                                               "open it from another card",
                                               b, card));
          } else {
            // Mapped like a peer window of the client's own, and given back when the exporter leaves.
            reply.args[0] = links_[card]->map_peer(client, e.card, e.addr, e.bytes);
            reply.args[1] = e.card;
            reply.args[2] = e.addr;
            reply.args[3] = e.bytes;
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
          if (b >= mine[card].queues) {
            fail(kInvalidArgument, fmt::format("spyre-simd: no queue {} (this client has {})", b, mine[card].queues));
            break;
          }
          reply.args[0] = sim_.wait_begin(card, mine[card].first_queue + static_cast<uint32_t>(b), c);
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
        case Command::kStatus:
          reply.text = status_json();
          break;
        case Command::kCount:
          break;
      }
    }
    if (m.flags & kFlagNoReply) continue;
    if (const std::string err = send_message(sock, reply); !err.empty()) break;
  }
  close(sock);
  for (const uint64_t token : waits) sim_.wait_end(token, false);  // it waits no more
  release(client, slot);
  log("simd").info("client {} gone", client);
}

int Daemon::admit(uint32_t client, uint64_t pid, uint32_t card) {
  int slot = -1;
  Slot s;
  {
    std::lock_guard lock(mu_);
    std::vector<Slot>& free = slots_[card];
    for (size_t i = 0; i < free.size() && slot < 0; ++i) {
      if (free[i].client == 0) slot = static_cast<int>(i);
    }
    if (slot < 0) return -1;
    free[static_cast<size_t>(slot)].client = client;
    free[static_cast<size_t>(slot)].pid = pid;
    s = free[static_cast<size_t>(slot)];
  }
  for (uint32_t q = s.first_queue; q < s.first_queue + s.queues; ++q) {
    write64(sim_, card, hw::mgmt_reg(q, hw::kMQMemBaseLo), s.mem_base);
    write64(sim_, card, hw::mgmt_reg(q, hw::kMQMemSizeLo), s.mem_bytes);
    write64(sim_, card, hw::mgmt_reg(q, hw::kMQIovaBaseLo), uint64_t{client} << kClientShift);
    write64(sim_, card, hw::mgmt_reg(q, hw::kMQIovaSizeLo), uint64_t{1} << kClientShift);
    sim_.mmio_write(card, hw::queue_reg(q, hw::kQControl), hw::kQControlReset);  // a fresh queue
    links_[card]->set_owner(q, client);
  }
  return slot;
}

uint64_t Daemon::ipc_export(uint32_t client, const Slot& s, uint32_t card, uint64_t addr, uint64_t bytes,
                            std::string* why) {
  if (!hw::in_window(addr, bytes, s.mem_base, s.mem_bytes)) {
    *why =
        fmt::format("spyre-simd: cannot share {:#x} + {}: it is outside this client's window of card {} ({:#x} + {})",
                    addr, bytes, card, s.mem_base, s.mem_bytes);
    return 0;
  }
  // A handle is unguessable, so that only the processes it is given to reach the memory.
  static thread_local std::mt19937_64 random{std::random_device{}()};
  std::lock_guard lock(mu_);
  uint64_t handle = 0;
  while (handle == 0 || exports_.count(handle) != 0) handle = random();
  exports_[handle] = {client, card, addr, bytes};
  return handle;
}

void Daemon::release(uint32_t client, const std::vector<int>& slots) {
  std::vector<Slot> held(slots.size());
  {
    std::lock_guard lock(mu_);
    for (uint32_t card = 0; card < slots.size(); ++card) {
      if (slots[card] >= 0) held[card] = slots_[card][static_cast<size_t>(slots[card])];
    }
    // What it shared is given back first: no other client's DMA reaches its windows from now on.
    for (auto it = exports_.begin(); it != exports_.end();) {
      it = it->second.client == client ? exports_.erase(it) : std::next(it);
    }
  }
  for (uint32_t card = 0; card < slots.size(); ++card) {
    if (slots[card] < 0) continue;
    for (auto& link : links_) link->revoke_peer(card, held[card].mem_base, held[card].mem_bytes);
  }
  // Its queues stop first (a reset drops what they hold; a running program ends within the
  // watchdog's budget), then its memory is scrubbed, so nothing of it reaches the next client.
  for (uint32_t card = 0; card < slots.size(); ++card) {
    if (slots[card] < 0) continue;
    const Slot& s = held[card];
    reset_queues(s, card);
    for (uint32_t q = s.first_queue; q < s.first_queue + s.queues; ++q) links_[card]->set_owner(q, 0);
    // A copy or launch already running goes on to its end (the watchdog bounds a launch):
    // scrubbing before it ends would leave what it writes afterwards to the next client.
    const auto since = std::chrono::steady_clock::now();
    bool told = false;
    for (uint32_t q = s.first_queue; q < s.first_queue + s.queues; ++q) {
      // All ones: the card does not answer (link down); nothing it runs reaches anyone now.
      for (uint32_t active;
           (active = sim_.mmio_read(card, hw::queue_reg(q, hw::kQActive))) != 0 && active != kAllOnes && !stopping_;) {
        sim_.note_poll();  // with host pacing, the card runs on although no client waits
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!told && std::chrono::steady_clock::now() - since > std::chrono::seconds(5)) {
          log("simd").warn("client {} left a command running on card {} queue {}; its slot is freed when it ends",
                           client, card, q);
          told = true;
        }
      }
    }
    {
      const std::lock_guard lock(scrub_mu_);
      write64(sim_, card, hw::kMgmtScrubBaseLo, s.mem_base);
      write64(sim_, card, hw::kMgmtScrubSizeLo, s.mem_bytes);
      sim_.mmio_write(card, hw::kMgmtScrub, 1);
    }
    (void)sim_.mmio_read(card, hw::kRegMagic);  // the resets and the scrub have landed
  }
  for (auto& link : links_) link->drop(client);
  std::lock_guard lock(mu_);
  for (uint32_t card = 0; card < slots.size(); ++card) {
    if (slots[card] < 0) continue;
    Slot& freed = slots_[card][static_cast<size_t>(slots[card])];
    freed.client = 0;
    freed.pid = 0;
    freed.scrub_base = freed.scrub_size = 0;
    ++scrubs_;
  }
  --clients_;
  connected_.erase(client);
  last_seen_ = std::chrono::steady_clock::now();
}

void Daemon::reset_queues(const Slot& s, uint32_t card) {
  for (uint32_t q = s.first_queue; q < s.first_queue + s.queues; ++q) {
    sim_.mmio_write(card, hw::queue_reg(q, hw::kQControl), hw::kQControlReset);
  }
}

std::string Daemon::refusal(uint64_t pid, uint32_t card) {
  std::lock_guard lock(mu_);
  std::string pids;
  for (const Slot& s : slots_[card]) pids += (pids.empty() ? "" : ", ") + std::to_string(s.pid);
  return fmt::format(
      "spyre-simd on {}: all {} slot(s) of card {} are in use (pids {}); pid {} must wait for one to exit "
      "(spyre-smi --daemon lists them), use another card, or start the daemon with more --slots",
      path_, slots_[card].size(), card, pids, pid);
}

uint32_t Daemon::client_read(const Slot& s, uint32_t card, uint32_t offset) {
  switch (offset) {
    case hw::kRegNumQueues:
      return s.queues;
    case hw::kRegMemSizeLo:
      return static_cast<uint32_t>(s.mem_bytes);
    case hw::kRegMemSizeHi:
      return static_cast<uint32_t>(s.mem_bytes >> 32);
    case hw::kRegMemBaseLo:
      return static_cast<uint32_t>(s.mem_base);
    case hw::kRegMemBaseHi:
      return static_cast<uint32_t>(s.mem_base >> 32);
    default:
      break;
  }
  if (offset >= hw::kQueueBase && offset < hw::queue_reg(hw::kMaxQueues, 0)) {
    const uint32_t q = (offset - hw::kQueueBase) / hw::kQueueStride;
    const uint32_t reg = (offset - hw::kQueueBase) % hw::kQueueStride;
    return q < s.queues ? sim_.mmio_read(card, hw::queue_reg(s.first_queue + q, reg)) : kAllOnes;
  }
  if (offset >= hw::kMgmtBase && offset < hw::kMgmtEnd) return kAllOnes;  // not the client's
  return sim_.mmio_read(card, offset);
}

void Daemon::client_write(Slot& s, uint32_t card, uint32_t offset, uint32_t value) {
  if (offset == hw::kRegControl) {
    // A client's device reset is a reset of its own function: its queues, nobody else's.
    if (value & hw::kControlReset) reset_queues(s, card);
    return;
  }
  if (offset >= hw::kQueueBase && offset < hw::queue_reg(hw::kMaxQueues, 0)) {
    const uint32_t q = (offset - hw::kQueueBase) / hw::kQueueStride;
    const uint32_t reg = (offset - hw::kQueueBase) % hw::kQueueStride;
    if (q >= s.queues) return;  // another client's queue, or none: dropped
    const uint32_t phys = s.first_queue + q;
    // Interrupts are routed by vector: a queue's vector is its own index on the card.
    sim_.mmio_write(card, hw::queue_reg(phys, reg), reg == hw::kQMsixVector ? phys : value);
    return;
  }
  if (offset >= hw::kMgmtScrubBaseLo && offset <= hw::kMgmtScrub) {
    // A client may scrub its own memory (its driver zeroes what it frees, which gives the card's
    // host backing back); a range outside its window is dropped.
    const auto set = [&](uint64_t& reg, bool hi) {
      reg = hi ? (reg & 0xffffffffu) | uint64_t{value} << 32 : (reg & ~uint64_t{0xffffffffu}) | value;
    };
    if (offset == hw::kMgmtScrubBaseLo || offset == hw::kMgmtScrubBaseHi) set(s.scrub_base, offset & 4);
    if (offset == hw::kMgmtScrubSizeLo || offset == hw::kMgmtScrubSizeHi) set(s.scrub_size, offset & 4);
    if (offset == hw::kMgmtScrub && (value & 1) && hw::in_window(s.scrub_base, s.scrub_size, s.mem_base, s.mem_bytes)) {
      const std::lock_guard lock(scrub_mu_);  // the card has one set of scrub registers
      write64(sim_, card, hw::kMgmtScrubBaseLo, s.scrub_base);
      write64(sim_, card, hw::kMgmtScrubSizeLo, s.scrub_size);
      sim_.mmio_write(card, hw::kMgmtScrub, 1);
    }
    return;
  }
  // Every other register is read-only to a client; the rest of the management page is the daemon's.
}

std::string Daemon::status_json() {
  std::vector<std::vector<Slot>> slots;
  uint64_t scrubs = 0;
  {
    std::lock_guard lock(mu_);
    slots = slots_;
    scrubs = scrubs_;
  }
  nlohmann::json j;
  j["socket"] = path_;
  j["pid"] = static_cast<uint64_t>(getpid());
  j["config_hash"] = fmt::format("{:016x}", config_hash_);
  j["uptime_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  j["scrubs"] = scrubs;
  j["clients"] = nlohmann::json::array();  // every slot of every card, free or held
  for (uint32_t card = 0; card < slots.size(); ++card) {
    for (size_t i = 0; i < slots[card].size(); ++i) {
      const Slot& s = slots[card][i];
      j["clients"].push_back({{"card", card},
                              {"slot", i},
                              {"client", s.client},
                              {"pid", s.pid},
                              {"first_queue", s.first_queue},
                              {"queues", s.queues},
                              {"memory_base", s.mem_base},
                              {"memory_bytes", s.mem_bytes}});
    }
  }
  j["cards"] = nlohmann::json::array();
  for (uint32_t card = 0; card < sim_.num_cards(); ++card) {
    nlohmann::json c;
    c["index"] = card;
    c["interface_version"] = sim_.mmio_read(card, hw::kRegVersion);
    const uint32_t st = sim_.mmio_read(card, hw::kRegStatus);
    c["answers"] = st != kAllOnes;
    c["firmware_ready"] = st != kAllOnes && (st & hw::kStatusFirmwareReady) != 0;
    const uint64_t lo = sim_.mmio_read(card, hw::kRegCycleLo);
    c["cycles"] = lo | uint64_t{sim_.mmio_read(card, hw::kRegCycleHi)} << 32;
    c["memory_bytes"] = sim_.mmio_read(card, hw::kRegMemSizeLo) | uint64_t{sim_.mmio_read(card, hw::kRegMemSizeHi)}
                                                                      << 32;
    c["queues"] = nlohmann::json::array();
    const uint32_t nq = std::min(sim_.mmio_read(card, hw::kRegNumQueues), hw::kMaxQueues);
    for (uint32_t q = 0; q < nq; ++q) {
      const uint32_t qs = sim_.mmio_read(card, hw::queue_reg(q, hw::kQStatus));
      uint32_t owner = 0;
      for (const Slot& s : slots[card]) {
        if (q >= s.first_queue && q < s.first_queue + s.queues) owner = s.client;
      }
      c["queues"].push_back(
          {{"id", q},
           {"client", owner},
           {"enabled", (qs & hw::kQStatusEnabled) != 0},
           {"error", (qs & hw::kQStatusError) != 0},
           {"halted", (qs & hw::kQStatusHalted) != 0},
           {"last_error", (qs & hw::kQStatusError) ? hw::error_name(static_cast<hw::ErrorCode>(qs >> 16)) : ""},
           {"head", sim_.mmio_read(card, hw::queue_reg(q, hw::kQHead))},
           {"tail", sim_.mmio_read(card, hw::queue_reg(q, hw::kQTail))},
           {"resets", sim_.mmio_read(card, hw::queue_reg(q, hw::kQResets))}});
    }
    j["cards"].push_back(std::move(c));
  }
  return j.dump();
}

}  // namespace spyre::simd
