// One levelled, tagged logger per component of the C++ stack (spdlog). The level comes from
// $SPYRE_LOG_LEVEL: trace, debug, info, warn (default), error, critical or off. Messages go to
// stderr as "[spyre.<component>] <level>: <message>".
#pragma once

#include <spdlog/logger.h>

namespace spyre {

/// The logger of `component` ("sim", "driver", ...), created on first use. Thread-safe.
spdlog::logger& log(const char* component);

}  // namespace spyre
