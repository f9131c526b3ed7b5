#include "spyre/common/log.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace spyre {

spdlog::logger& log(const char* component) {
  static std::mutex mu;
  const std::string name = std::string("spyre.") + component;
  std::lock_guard lock(mu);
  if (auto existing = spdlog::get(name)) return *existing;
  auto logger = spdlog::stderr_logger_mt(name);
  logger->set_pattern("[%n] %l: %v");
  spdlog::level::level_enum level = spdlog::level::warn;
  if (const char* env = std::getenv("SPYRE_LOG_LEVEL"); env && *env) {
    level = spdlog::level::from_str(env);  // unknown names give "off"; say so
    if (level == spdlog::level::off && std::string(env) != "off") {
      static bool told = false;  // under mu
      if (!std::exchange(told, true)) {
        logger->warn("SPYRE_LOG_LEVEL='{}' is not a level (trace, debug, info, warn, error, critical, off)", env);
      }
      level = spdlog::level::warn;
    }
  }
  logger->set_level(level);
  return *logger;  // spdlog's registry keeps it alive
}

}  // namespace spyre
