#include <cstring>
#include <stdexcept>

#include "spyre/compiler/program.h"

namespace spyre::compiler {

Program assemble(std::string name, const std::vector<std::vector<hw::Instr>>& per_core, uint32_t num_args) {
  if (per_core.empty() || per_core.size() > 64) throw std::invalid_argument("assemble: need 1..64 core streams");
  hw::ProgramHeader h{};
  h.magic = hw::kProgramMagic;
  h.version = hw::kIsaVersion;
  h.num_entries = static_cast<uint16_t>(per_core.size());
  const uint64_t table = sizeof h + 4ull * per_core.size();
  h.instr_offset = static_cast<uint32_t>((table + sizeof(hw::Instr) - 1) / sizeof(hw::Instr) * sizeof(hw::Instr));
  std::vector<uint32_t> entry;
  std::vector<hw::Instr> code;
  for (const auto& stream : per_core) {
    entry.push_back(static_cast<uint32_t>(code.size()));
    code.insert(code.end(), stream.begin(), stream.end());
    code.push_back(hw::Instr{});  // kEnd
  }
  h.num_instrs = static_cast<uint32_t>(code.size());

  Program p;
  p.name = std::move(name);
  p.num_args = num_args;
  p.core_mask = per_core.size() == 64 ? ~0ull : (1ull << per_core.size()) - 1;
  p.image.assign(h.instr_offset + code.size() * sizeof(hw::Instr), 0);
  std::memcpy(p.image.data(), &h, sizeof h);
  std::memcpy(p.image.data() + sizeof h, entry.data(), entry.size() * 4);
  std::memcpy(p.image.data() + h.instr_offset, code.data(), code.size() * sizeof(hw::Instr));
  return p;
}

}  // namespace spyre::compiler
