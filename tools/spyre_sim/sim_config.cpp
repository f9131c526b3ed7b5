#include "sim_config.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace spyre::simtool {
namespace {

using nlohmann::json;

json read_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument(fmt::format("config: cannot read '{}'", file));
  std::stringstream text;
  text << in.rdbuf();
  try {
    sim::check_config_text(text.str());  // valid JSON, no key given twice
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{} (in '{}')", e.what(), file));
  }
  return json::parse(text.str());
}

// Sets `tree`'s entry at dotted `key` to `value`, creating the objects on the way.
void set_dotted(json& tree, const std::string& key, json value) {
  json* node = &tree;
  size_t start = 0;
  for (;;) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) throw std::invalid_argument(fmt::format("config: --set key '{}' has an empty part", key));
    if (node->is_null()) *node = json::object();
    if (!node->is_object()) {
      throw std::invalid_argument(
          fmt::format("config: --set '{}' reaches into '{}', which is not an object", key, key.substr(0, start - 1)));
    }
    node = &(*node)[part];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  *node = std::move(value);
}

}  // namespace

sim::Config build_config(const std::vector<std::string>& files, const std::vector<std::string>& sets,
                         const std::string& base) {
  json over = base.empty() ? json::object() : json::parse(base);
  std::string sources;  // for messages: where the overrides came from
  for (const std::string& file : files) {
    if (file.empty()) continue;
    json j = read_file(file);
    if (!j.is_object()) throw std::invalid_argument(fmt::format("config: '{}' must hold a JSON object", file));
    over.merge_patch(j);
    sources += (sources.empty() ? "" : ", ") + file;
  }
  for (const std::string& s : sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument(fmt::format("config: --set takes key=value, e.g. chip.cores=8 (got '{}')", s));
    }
    const std::string text = s.substr(eq + 1);
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = text;  // not JSON: a string
    set_dotted(over, s.substr(0, eq), std::move(value));
  }
  if (!sets.empty()) sources += (sources.empty() ? "" : ", ") + std::string("--set");
  try {
    return sim::parse_config(over.dump());
  } catch (const std::invalid_argument& e) {
    if (sources.empty()) throw;
    throw std::invalid_argument(fmt::format("{} (from {})", e.what(), sources));
  }
}

}  // namespace spyre::simtool
