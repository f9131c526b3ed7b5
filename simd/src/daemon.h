// spyre-simd's server: the process's simulated cards, served to driver processes over a Unix
// socket (the socket transport). One thread per client; each client's DMA memory arrives as
// memfds it maps here. docs/design-daemon.md: what is built and what is still to come (per-client
// isolation of device memory and queues).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/sim/simulator.h"

namespace spyre::simd {

class Daemon {
 public:
  /// Serves `sim`'s cards on `socket_path`. With `idle_exit` > 0, run() returns once no client
  /// has been connected for that long (a daemon a client started on its own).
  Daemon(sim::Simulator& sim, std::string socket_path, std::chrono::milliseconds idle_exit);
  ~Daemon();
  /// Listens and serves until stop() or the idle timeout. Returns a process exit code.
  int run();
  void stop() { stopping_ = true; }

 private:
  class CardLink;
  void serve(int sock, uint32_t client);
  void drop_client(uint32_t client);
  /// The client may use the cards: no other client holds them.
  bool admit(uint32_t client, uint64_t pid);

  sim::Simulator& sim_;
  std::string path_;
  std::chrono::milliseconds idle_exit_;
  uint64_t config_hash_;  // what a client must ask for (Config::hash: the report paths aside)
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<CardLink>> links_;
  std::mutex mu_;
  uint32_t next_client_ = 1;
  uint32_t clients_ = 0;
  uint32_t holder_ = 0;  // the client that holds the cards (0: none)
  uint64_t holder_pid_ = 0;
  std::chrono::steady_clock::time_point last_seen_;
};

}  // namespace spyre::simd
