#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "spyre/compiler/errors.h"
#include "spyre/compiler/program.h"

namespace spyre::compiler {

namespace {

Program image(std::string name, const std::vector<uint32_t>& entry, const std::vector<hw::Instr>& code,
              uint32_t num_args, const std::vector<std::string>& strings) {
  if (entry.empty() || entry.size() > 64) throw Malformed("assemble: need 1..64 cores");
  hw::ProgramHeader h{};
  h.magic = hw::kProgramMagic;
  h.version = hw::kIsaVersion;
  h.num_entries = static_cast<uint16_t>(entry.size());
  const uint64_t table = sizeof h + 4ull * entry.size();
  h.instr_offset = static_cast<uint32_t>((table + sizeof(hw::Instr) - 1) / sizeof(hw::Instr) * sizeof(hw::Instr));
  h.num_instrs = static_cast<uint32_t>(code.size());
  // The name follows the code, padded to a whole instruction so that the image stays a multiple of 32.
  if (name.size() >= hw::kMaxLabelBytes) name.resize(hw::kMaxLabelBytes - 1);
  const uint64_t code_end = h.instr_offset + code.size() * sizeof(hw::Instr);
  h.name_offset = name.empty() ? 0 : static_cast<uint32_t>(code_end);
  h.name_size = static_cast<uint32_t>(name.size());
  const uint64_t name_room = (name.size() + sizeof(hw::Instr) - 1) / sizeof(hw::Instr) * sizeof(hw::Instr);
  // PRINT's format strings after the name, each with its NUL, padded the same way.
  std::string formats;
  for (const std::string& f : strings) formats += f + '\0';
  if (formats.size() > (1u << 20)) throw Malformed("assemble: more than 1 MiB of format strings");
  h.strings_offset = formats.empty() ? 0 : static_cast<uint32_t>(code_end + name_room);
  h.strings_size = static_cast<uint32_t>(formats.size());
  const uint64_t strings_room = (formats.size() + sizeof(hw::Instr) - 1) / sizeof(hw::Instr) * sizeof(hw::Instr);

  Program p;
  p.num_args = num_args;
  p.core_mask = entry.size() == 64 ? ~0ull : (1ull << entry.size()) - 1;
  p.image.assign(code_end + name_room + strings_room, 0);
  std::memcpy(p.image.data(), &h, sizeof h);
  std::memcpy(p.image.data() + sizeof h, entry.data(), entry.size() * 4);
  std::memcpy(p.image.data() + h.instr_offset, code.data(), code.size() * sizeof(hw::Instr));
  std::memcpy(p.image.data() + code_end, name.data(), name.size());
  std::memcpy(p.image.data() + code_end + name_room, formats.data(), formats.size());
  p.name = std::move(name);
  return p;
}

}  // namespace

Program assemble(std::string name, const std::vector<std::vector<hw::Instr>>& per_core, uint32_t num_args,
                 const std::vector<std::string>& strings) {
  std::vector<uint32_t> entry;
  std::vector<hw::Instr> code;
  for (const auto& stream : per_core) {
    entry.push_back(static_cast<uint32_t>(code.size()));
    code.insert(code.end(), stream.begin(), stream.end());
    code.push_back(hw::Instr{});  // END
  }
  return image(std::move(name), entry, code, num_args, strings);
}

Program assemble_spmd(std::string name, std::vector<hw::Instr> code, uint32_t cores, uint32_t num_args) {
  code.push_back(hw::Instr{});  // END
  return image(std::move(name), std::vector<uint32_t>(cores, 0), code, num_args, {});
}

}  // namespace spyre::compiler
