// spyre-simd's server: the process's simulated cards, served to driver processes over a Unix
// socket (the socket transport). One thread per client; each client's DMA memory arrives as
// memfds it maps here. Each card is cut into functions like SR-IOV virtual functions; a client
// that opens a card takes a free slot of it — its own hardware queues, a device-memory window and
// an IOMMU domain, set in the card's management page (hw/regs.h) — and sees a card of its own
// through it. With one slot per card, each card serves one process whole (torchrun's ranks).
// docs/design-daemon.md.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "card_link.h"
#include "spyre/sim/simulator.h"

namespace spyre::simd {

class Daemon {
 public:
  /// Serves `sim`'s cards on `socket_path`. With `idle_exit` > 0, run() returns once no client
  /// has been connected for that long (a daemon a client started on its own).
  /// Each card is cut into `slots` slots (fewer when a card has fewer queues): at most that many
  /// clients open one card at once.
  Daemon(sim::Simulator& sim, std::string socket_path, std::chrono::milliseconds idle_exit, uint32_t slots = 4);
  ~Daemon();
  /// Listens and serves until stop() or the idle timeout. Returns a process exit code.
  int run();
  void stop() { stopping_ = true; }

 private:
  /// A client's share of one card: queues [first_queue, + queues) and device memory
  /// [mem_base, + mem_bytes); client 0: free.
  struct Slot {
    uint32_t client = 0;
    uint64_t pid = 0;
    uint32_t first_queue = 0;
    uint32_t queues = 0;
    uint64_t mem_base = 0;
    uint64_t mem_bytes = 0;
    // The client's scrub registers: a scrub inside its own window goes to the card.
    uint64_t scrub_base = 0, scrub_size = 0;
  };
  void serve(int sock, uint32_t client);
  /// Gives the client a free slot of `card` and programs its windows; -1 when none is free.
  int admit(uint32_t client, uint64_t pid, uint32_t card);
  /// Stops what the client left on the cards it opened (`slots[card]`, -1 where it did not): its
  /// queues reset, its windows scrubbed, its slots freed.
  void release(uint32_t client, const std::vector<int>& slots);
  /// The client's BAR0 read or write, through its slot: its own queues renumbered from 0, its
  /// window as the card's memory; nothing of other clients or of the management page.
  uint32_t client_read(const Slot& s, uint32_t card, uint32_t offset);
  void client_write(Slot& s, uint32_t card, uint32_t offset, uint32_t value);
  /// Resets every queue of the slot on `card` (they drop what they hold).
  void reset_queues(const Slot& s, uint32_t card);
  std::string status_json();
  std::string refusal(uint64_t pid, uint32_t card);
  /// Why a client whose config source is `text` (digest `digest`) is refused: it asks for another
  /// config than this daemon simulates, or for one that does not load. "" when it is this one.
  std::string config_refusal(uint64_t digest, const std::string& text) const;

  /// Memory a client shared with the others (kIpcExport): [addr, + bytes) of `card`, in its window.
  struct Export {
    uint32_t client;
    uint32_t card;
    uint64_t addr;
    uint64_t bytes;
  };
  /// Exports `bytes` at `addr` of `card` for the client of `s`; its handle, or 0 and `why`.
  uint64_t ipc_export(uint32_t client, const Slot& s, uint32_t card, uint64_t addr, uint64_t bytes, std::string* why);

  sim::Simulator& sim_;
  std::string path_;
  std::chrono::milliseconds idle_exit_;
  uint64_t config_hash_;    // what a client must ask for (Config::hash: the report paths aside)
  uint64_t source_digest_;  // the digest of this process's own config source: a client's equal one needs no parse
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<CardLink>> links_;
  std::mutex mu_;
  std::mutex scrub_mu_;  // the five writes of one scrub reach a card together
  uint32_t next_client_ = 1;
  uint32_t clients_ = 0;
  std::set<uint32_t> connected_;          // ids of the connected clients
  std::vector<std::vector<Slot>> slots_;  // per card; guarded by mu_
  std::map<uint64_t, Export> exports_;    // by handle; guarded by mu_
  uint64_t scrubs_ = 0;                   // windows scrubbed after their clients left
  std::chrono::steady_clock::time_point last_seen_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace spyre::simd
