// spyre-sim's hardware config: the defaults, then the file named by $SPYRE_CONFIG (as every program
// of the stack reads it, so that spyre-sweep can run spyre-sim as a workload), then the --config
// file, then the --set overrides in the order given. Each file may hold any subset of the keys.
#pragma once

#include <string>
#include <vector>

#include "spyre/sim/config.h"

namespace spyre::simtool {

/// Builds the config from the JSON files `files` (later ones override earlier ones; empty names
/// are skipped) and `sets`, each "dotted.key=value" with the value parsed as JSON and taken as a
/// string when it is not JSON (chip.fp16_format=ieee). Report paths are left as the files say.
/// Throws std::invalid_argument "config: ..." naming the file or the key: an unreadable file,
/// invalid JSON, a --set without '=', an unknown key, a wrong type or an out-of-range value.
/// `base`, when not empty, is a config's JSON (a capture's) that the files and sets override in
/// place of the defaults.
sim::Config build_config(const std::vector<std::string>& files, const std::vector<std::string>& sets,
                         const std::string& base = "");

}  // namespace spyre::simtool
