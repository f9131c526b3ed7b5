#include "spyre/compiler/emit.h"

#include <stdexcept>

namespace spyre::compiler::emit {

void Builder::branch(hw::Cond cond, uint32_t x, uint32_t y, Label to) {
  hw::Instr i = instr(hw::Op::kBranch);
  i.flags = static_cast<uint8_t>(cond);
  i.d = x;
  i.e = y;
  fixups_.emplace_back(pos(), to);
  emit(i);
}

std::vector<hw::Instr> Builder::finish() {
  for (const auto& [at, l] : fixups_) {
    if (targets_.at(l) == kUnbound) throw std::logic_error("compiler: branch to a label that was never bound");
    code_[at].a = targets_[l];
  }
  fixups_.clear();
  return code_;
}

}  // namespace spyre::compiler::emit
