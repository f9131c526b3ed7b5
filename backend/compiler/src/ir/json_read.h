// Reading the compiler's JSON documents (graphs, and the planner's segments): every field checked
// as it is read, a malformed one an std::invalid_argument naming where it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spyre/compiler/ir.h"
#include "spyre/hw/commands.h"

namespace spyre::compiler::json_read {

using nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& what);
json parse(std::string_view text);
const json& field(const json& j, const char* name, const std::string& where);
int64_t integer(const json& j, const std::string& where);
/// An integer in [0, limit).
uint32_t index(const json& j, uint64_t limit, const std::string& where);
/// A number; infinities and NaN travel as the strings "inf", "-inf", "nan".
double number(const json& j, const std::string& where);
std::vector<int64_t> integers(const json& j, const std::string& where);
hw::DType dtype(const json& j, const std::string& where);
/// "num_args" (at most `max_args`) and "views" of a document into `g`.
void read_views(const json& doc, ir::Graph& g, uint64_t max_args = hw::kMaxLaunchArgs);

}  // namespace spyre::compiler::json_read
