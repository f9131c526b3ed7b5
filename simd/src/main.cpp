// spyre-simd: the simulator daemon. Runs the simulated cards of $SPYRE_CONFIG in this process and
// serves them to driver processes over a Unix socket (SPYRE_TRANSPORT=socket). Started by hand, it
// runs until SIGINT or SIGTERM; started by a driver that found none (--auto), it exits once no
// client has been connected for --idle-seconds.
#include <csignal>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "daemon.h"
#include "spyre/common/log.h"
#include "spyre/hw/regs.h"
#include "spyre/simd/channel.h"
#include "spyre/simd/protocol.h"

namespace {
spyre::simd::Daemon* g_daemon = nullptr;
void on_signal(int) {
  if (g_daemon) g_daemon->stop();
}
}  // namespace

namespace {

int serve(int argc, char** argv) {
  CLI::App app{"spyre-simd: serves simulated Spyre cards to driver processes over a Unix socket"};
  app.set_version_flag("--version", fmt::format("spyre-simd {} (hardware interface v{}, protocol v{})", SPYRE_VERSION,
                                                spyre::hw::kInterfaceVersion, spyre::simd::kProtocolVersion));
  std::string socket;
  bool auto_started = false;
  double idle_seconds = 10;
  uint32_t slots = 4;
  app.add_option("--socket", socket, "socket path (default: $SPYRE_SIMD_SOCKET, or one per config source)");
  app.add_flag("--auto", auto_started, "started by a driver: exit when idle");
  app.add_option("--idle-seconds", idle_seconds, "with --auto: exit after this long without a client")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--slots", slots,
                 "processes that share one card at once: a process that opens a card gets one slot of it, "
                 "queues/slots hardware queues and memory/slots of device memory (1: each card whole to "
                 "one process, as torchrun's ranks want)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    spyre::sim::Simulator& sim = spyre::sim::Simulator::instance();
    if (socket.empty()) {  // the socket that a client of this config source looks for
      spyre::simd::ConfigSource source;
      if (const std::string why = spyre::simd::read_config_source(&source); !why.empty()) throw std::runtime_error(why);
      socket = spyre::simd::default_socket_path(spyre::simd::config_digest(source));
    }
    const auto idle = auto_started ? std::chrono::milliseconds(static_cast<int64_t>(idle_seconds * 1000))
                                   : std::chrono::milliseconds(0);
    spyre::simd::Daemon daemon(sim, socket, idle, slots);
    g_daemon = &daemon;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    const int rc = daemon.run();
    g_daemon = nullptr;
    (void)sim.flush_reports();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spyre-simd: %s\n", e.what());
    return 1;
  }
}

}  // namespace

// Whatever escapes (the command line's own setup included) ends the program with its message, not
// with std::terminate.
int main(int argc, char** argv) {
  try {
    return serve(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spyre-simd: %s\n", e.what());
    return 1;
  }
}
