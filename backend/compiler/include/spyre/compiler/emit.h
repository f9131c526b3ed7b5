// The tile-ISA assembler: one code buffer with forward and backward labels, and a constructor for
// each instruction, so that lowerings (and testbenches that hand-write programs) read like assembly.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "spyre/hw/isa.h"

namespace spyre::compiler::emit {

class Builder {
 public:
  using Label = uint32_t;

  Label label() {
    targets_.push_back(kUnbound);
    return static_cast<Label>(targets_.size() - 1);
  }
  void bind(Label l) { targets_[l] = pos(); }
  uint32_t pos() const { return static_cast<uint32_t>(code_.size()); }
  void emit(const hw::Instr& in) { code_.push_back(in); }

  void branch(hw::Cond cond, uint32_t x, uint32_t y, Label to);
  void jump(Label to) { branch(hw::Cond::kAlways, 0, 0, to); }

  /// The code with every branch pointing at its label's instruction. Throws std::logic_error
  /// for a label that was never bound.
  std::vector<hw::Instr> finish();

 private:
  static constexpr uint32_t kUnbound = UINT32_MAX;
  std::vector<hw::Instr> code_;
  std::vector<uint32_t> targets_;
  std::vector<std::pair<uint32_t, Label>> fixups_;  // (branch position, label)
};

inline hw::Instr instr(hw::Op op) {
  hw::Instr i{};
  i.op = op;
  return i;
}
inline hw::Instr li(uint32_t r, uint64_t value) {
  hw::Instr i = instr(hw::Op::kLi);
  i.a = r;
  i.b = value;
  return i;
}
inline hw::Instr arg(uint32_t r, uint32_t slot) {
  hw::Instr i = instr(hw::Op::kArg);
  i.a = r;
  i.b = slot;
  return i;
}
inline hw::Instr addi(uint32_t r, uint32_t src, int64_t imm) {
  hw::Instr i = instr(hw::Op::kAddi);
  i.a = r;
  i.d = src;
  i.b = static_cast<uint64_t>(imm);
  return i;
}
inline hw::Instr muli(uint32_t r, uint32_t src, int64_t imm) {
  hw::Instr i = instr(hw::Op::kMuli);
  i.a = r;
  i.d = src;
  i.b = static_cast<uint64_t>(imm);
  return i;
}
inline hw::Instr reg3(hw::Op op, uint32_t r, uint32_t x, uint32_t y) {
  hw::Instr i = instr(op);
  i.a = r;
  i.d = x;
  i.e = y;
  return i;
}
inline hw::Instr add(uint32_t r, uint32_t x, uint32_t y) {
  return reg3(hw::Op::kAdd, r, x, y);
}
inline hw::Instr divu(uint32_t r, uint32_t src, uint64_t imm) {
  hw::Instr i = instr(hw::Op::kDivu);
  i.a = r;
  i.d = src;
  i.b = imm;
  return i;
}
inline hw::Instr remu(uint32_t r, uint32_t src, uint64_t imm) {
  hw::Instr i = divu(r, src, imm);
  i.op = hw::Op::kRemu;
  return i;
}
/// r[r] = rank, r[r + 1] = cores in the launch.
inline hw::Instr rank(uint32_t r) {
  hw::Instr i = instr(hw::Op::kRank);
  i.a = r;
  return i;
}
/// LOAD or STORE of `rows` rows of `row_bytes` bytes between scratchpad `lx` (+ r[rl]) and device
/// r[rd] + `offset`, device rows `stride` bytes apart. `type` is the element type of the rows: it
/// does not change what moves, but tells a card in timing mode whether they can hold indices.
inline hw::Instr dma(hw::Op op, hw::DType type, uint32_t rd, uint32_t rl, uint32_t lx, uint64_t offset, uint64_t stride,
                     uint32_t rows, uint32_t row_bytes, bool async, uint32_t tag) {
  hw::Instr i = instr(op);
  i.dtype = type;
  i.regs = hw::pack_regs(rd, rl);
  i.flags = hw::dma_flags(async, tag);
  i.a = lx;
  i.b = offset;
  i.c = stride;
  i.d = rows;
  i.e = row_bytes;
  return i;
}
/// A BARRIER through which this core's `keep` latest MATMULs may go on running (0: none).
inline hw::Instr barrier(uint32_t keep = 0) {
  hw::Instr i = instr(hw::Op::kBarrier);
  i.flags = static_cast<uint8_t>(keep & hw::kBarrierKeepMask);
  return i;
}
inline hw::Instr wait_tags(uint32_t mask) {
  hw::Instr i = instr(hw::Op::kWait);
  i.a = mask;
  return i;
}
/// An SFP instruction on a rows x cols block; all scratchpad addresses are relative to r[rl].
inline hw::Instr sfp(hw::Op op, hw::DType t, uint32_t rl, uint32_t dst, uint64_t b, uint64_t c, uint32_t rows,
                     uint32_t cols, uint8_t flags = 0) {
  hw::Instr i = instr(op);
  i.dtype = t;
  i.regs = hw::pack_regs(0, rl);
  i.flags = flags;
  i.a = dst;
  i.b = b;
  i.c = c;
  i.d = rows;
  i.e = cols;
  return i;
}
inline uint64_t pack2(uint32_t lo, uint32_t hi) {
  return uint64_t{lo} | uint64_t{hi} << 32;
}
inline uint64_t double_bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  return b;
}

}  // namespace spyre::compiler::emit
