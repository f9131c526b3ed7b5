// A program image as text, one instruction per line, for TORCH_SPYRE_COMPILE_DEBUG dumps.
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "spyre/compiler/errors.h"
#include "spyre/compiler/program.h"

namespace spyre::compiler {

std::string listing(const std::vector<uint8_t>& image) {
  hw::ProgramHeader h{};
  if (image.size() < sizeof h) throw Malformed("listing: an image shorter than its header");
  std::memcpy(&h, image.data(), sizeof h);
  if (h.magic != hw::kProgramMagic) throw Malformed("listing: not a program image");
  if (h.instr_offset + uint64_t{h.num_instrs} * sizeof(hw::Instr) > image.size()) {
    throw Malformed("listing: instructions past the end of the image");
  }
  std::string out = fmt::format("; {} instructions, {} cores\n", h.num_instrs, h.num_entries);
  for (uint32_t i = 0; i < h.num_instrs; ++i) {
    hw::Instr in{};
    std::memcpy(&in, image.data() + h.instr_offset + i * sizeof(hw::Instr), sizeof in);
    out += fmt::format("{:5d}  {:<15} {:<5} f={:#04x} rd=r{} rl=r{} a={} b={:#x} c={:#x} d={} e={}\n", i,
                       hw::op_name(in.op), hw::dtype_name(in.dtype), in.flags, hw::reg_rd(in.regs), hw::reg_rl(in.regs),
                       in.a, in.b, in.c, in.d, in.e);
  }
  return out;
}

}  // namespace spyre::compiler
