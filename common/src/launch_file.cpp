#include "spyre/common/launch_file.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace spyre::launchfile {
namespace {

constexpr char kMagic[8] = {'S', 'P', 'Y', 'R', 'E', 'L', 'F', '1'};
constexpr uint64_t kMaxHeader = 64ull << 20;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("launch file '" + path + "': " + why);
}

void read_exact(std::ifstream& in, void* dst, uint64_t n, const std::string& path, const char* what) {
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
  if (static_cast<uint64_t>(in.gcount()) != n) fail(path, std::string("ends inside ") + what);
}

}  // namespace

void LaunchFile::save(const std::string& path) const {
  nlohmann::json h;
  h["version"] = 1;
  h["kernel"] = kernel;
  h["op"] = op;
  h["core_mask"] = core_mask;
  h["fp16_dlfloat"] = fp16_dlfloat;
  h["program_size"] = program.size();
  h["args"] = nlohmann::json::array();
  for (const Arg& a : args) {
    h["args"].push_back(a.in_block ? nlohmann::json{{"block", a.block}, {"offset", a.offset}}
                                   : nlohmann::json{{"value", a.value}});
  }
  h["blocks"] = nlohmann::json::array();
  for (const Block& b : blocks) h["blocks"].push_back({{"addr", b.addr}, {"size", b.size}});
  const std::string header = h.dump(1);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot be created");
  const uint64_t n = header.size();
  out.write(kMagic, sizeof kMagic);
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(header.data(), static_cast<std::streamsize>(n));
  out.write(reinterpret_cast<const char*>(program.data()), static_cast<std::streamsize>(program.size()));
  for (const Block& b : blocks)
    out.write(reinterpret_cast<const char*>(b.input.data()), static_cast<std::streamsize>(b.size));
  for (const Block& b : blocks) {
    out.write(reinterpret_cast<const char*>(b.output.data()), static_cast<std::streamsize>(b.size));
  }
  if (!out.flush()) fail(path, "could not be written in full");
}

LaunchFile LaunchFile::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot be opened");
  char magic[sizeof kMagic];
  read_exact(in, magic, sizeof magic, path, "its magic");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) fail(path, "is not a launch capture (no SPYRELF1 magic)");
  uint64_t n = 0;
  read_exact(in, &n, sizeof n, path, "its header length");
  if (n > kMaxHeader) fail(path, "has a header of " + std::to_string(n) + " bytes");
  std::string header(n, '\0');
  read_exact(in, header.data(), n, path, "its header");
  LaunchFile f;
  try {
    const nlohmann::json h = nlohmann::json::parse(header);
    if (h.at("version").get<int>() != 1) fail(path, "has version " + h.at("version").dump() + ", this reads 1");
    f.kernel = h.at("kernel").get<std::string>();
    f.op = h.at("op").get<std::string>();
    f.core_mask = h.at("core_mask").get<uint64_t>();
    f.fp16_dlfloat = h.at("fp16_dlfloat").get<bool>();
    f.program.resize(h.at("program_size").get<uint64_t>());
    for (const auto& b : h.at("blocks"))
      f.blocks.push_back({b.at("addr").get<uint64_t>(), b.at("size").get<uint64_t>(), {}, {}});
    for (const auto& a : h.at("args")) {
      Arg arg;
      if (a.contains("block")) {
        arg.in_block = true;
        arg.block = a.at("block").get<uint32_t>();
        arg.offset = a.at("offset").get<uint64_t>();
        if (arg.block >= f.blocks.size() || arg.offset >= f.blocks[arg.block].size) {
          fail(path, "has an argument outside its blocks");
        }
      } else {
        arg.value = a.at("value").get<uint64_t>();
      }
      f.args.push_back(arg);
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("has a malformed header (") + e.what() + ")");
  }
  read_exact(in, f.program.data(), f.program.size(), path, "the program");
  for (Block& b : f.blocks) {
    b.input.resize(b.size);
    read_exact(in, b.input.data(), b.size, path, "a block's input");
  }
  for (Block& b : f.blocks) {
    b.output.resize(b.size);
    read_exact(in, b.output.data(), b.size, path, "a block's output");
  }
  return f;
}

}  // namespace spyre::launchfile
