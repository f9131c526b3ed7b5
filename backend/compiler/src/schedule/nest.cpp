#include "nest.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "spyre/compiler/errors.h"

namespace spyre::compiler::schedule {
namespace {

using emit::Builder;

// Loop registers (see nest.h for the body's).
constexpr uint32_t kLeft = 5;  // items this core still has to run
constexpr uint32_t kTmp = 6;
constexpr uint32_t kLo = 7;  // first item of this core (kLo + 1 is clobbered by RANK)
constexpr uint32_t kHi = 8;
constexpr uint32_t counter_reg(uint32_t level) {
  return level_reg(level);
}

}  // namespace

uint64_t nest_items(const Nest& nest) {
  uint64_t n = 1;
  for (const Level& l : nest.levels) n *= l.count;
  return n;
}

uint64_t serial_items(const Nest& nest) {
  uint64_t n = 1;
  for (size_t l = nest.levels.size() - std::min<size_t>(nest.serial_levels, nest.levels.size()); l < nest.levels.size();
       ++l) {
    n *= nest.levels[l].count;
  }
  return n;
}

uint64_t nest_units(const Nest& nest) {
  return nest_items(nest) / serial_items(nest);
}

void emit_nest(Builder& b, const Nest& nest, uint32_t cores, const Body& body) {
  const auto ops = static_cast<uint32_t>(nest.operands.size());
  const auto levels = static_cast<uint32_t>(nest.levels.size());
  if (ops > kMaxOperands || levels > kMaxLevels || nest.tail_levels.size() > kMaxTailLevels) {
    throw Unsupported(fmt::format("compiler: a loop nest of {} operands and {} levels exceeds {} and {}", ops, levels,
                                  kMaxOperands, kMaxLevels));
  }
  const uint64_t units = nest_units(nest), serial = serial_items(nest);
  const Builder::Label done = b.label(), loop = b.label();

  if (nest.replicated) {  // every core runs items [0, items)
    b.emit(emit::li(kLo, 0));
    b.emit(emit::li(kLeft, units * serial));
  } else {
    // This core's share of the units [lo, hi): lo = rank * units / cores; each unit is `serial` items.
    b.emit(emit::rank(kLo));
    b.emit(emit::muli(kHi, kLo, static_cast<int64_t>(units)));
    b.emit(emit::addi(kHi, kHi, static_cast<int64_t>(units)));
    b.emit(emit::divu(kHi, kHi, cores));
    b.emit(emit::muli(kLo, kLo, static_cast<int64_t>(units)));
    b.emit(emit::divu(kLo, kLo, cores));
    b.emit(emit::muli(kTmp, kLo, -1));
    b.emit(emit::add(kLeft, kHi, kTmp));
    b.branch(hw::Cond::kEq, kLeft, 0, done);
    if (serial > 1) {
      b.emit(emit::muli(kLeft, kLeft, static_cast<int64_t>(serial)));
      b.emit(emit::muli(kLo, kLo, static_cast<int64_t>(serial)));
    }
  }

  // Loop counters of item lo, innermost level fastest; then the operands' addresses.
  uint64_t inner = 1;
  for (uint32_t l = levels; l-- > 0;) {
    b.emit(emit::divu(counter_reg(l), kLo, inner));
    b.emit(emit::remu(counter_reg(l), counter_reg(l), nest.levels[l].count));
    inner *= nest.levels[l].count;
  }
  for (uint32_t i = 0; i < ops; ++i) {
    b.emit(emit::arg(operand_reg(i), nest.operands[i].arg));
    if (nest.operands[i].offset_bytes != 0) {
      b.emit(emit::addi(operand_reg(i), operand_reg(i), nest.operands[i].offset_bytes));
    }
    for (uint32_t l = 0; l < levels; ++l) {
      if (nest.levels[l].stride_bytes[i] == 0) continue;
      b.emit(emit::muli(kTmp, counter_reg(l), nest.levels[l].stride_bytes[i]));
      b.emit(emit::add(operand_reg(i), operand_reg(i), kTmp));
    }
  }
  if (!nest.replicated) b.emit(emit::li(kBufferReg, nest.fixed_bytes));
  if (nest.before) nest.before(b);

  b.bind(loop);
  // A decision tree on the tail levels' counters picks the body variant of this item.
  const Builder::Label next = b.label();
  const std::function<void(size_t, uint32_t)> dispatch = [&](size_t i, uint32_t tails) {
    if (i == nest.tail_levels.size()) {
      body(b, tails);
      b.jump(next);
      return;
    }
    const uint32_t t = nest.tail_levels[i];
    const Builder::Label last = b.label();
    b.emit(emit::li(kTmp, nest.levels[t].count - 1));
    b.branch(hw::Cond::kEq, counter_reg(t), kTmp, last);
    dispatch(i + 1, tails);
    b.bind(last);
    dispatch(i + 1, tails | 1u << i);
  };
  dispatch(0, 0);
  b.bind(next);
  if (!nest.replicated) {
    b.emit(emit::muli(kTmp, kBufferReg, -1));
    b.emit(emit::addi(kBufferReg, kTmp, static_cast<int64_t>(2 * nest.fixed_bytes + nest.half_bytes)));
  }
  b.emit(emit::addi(kLeft, kLeft, -1));
  b.branch(hw::Cond::kEq, kLeft, 0, done);
  // Odometer: step the innermost level; on wrap, rewind it and carry into the next one out.
  for (uint32_t l = levels; l-- > 0;) {
    const Level& lv = nest.levels[l];
    b.emit(emit::addi(counter_reg(l), counter_reg(l), 1));
    for (uint32_t i = 0; i < ops; ++i) {
      if (lv.stride_bytes[i] != 0) b.emit(emit::addi(operand_reg(i), operand_reg(i), lv.stride_bytes[i]));
    }
    b.emit(emit::li(kTmp, lv.count));
    b.branch(hw::Cond::kNe, counter_reg(l), kTmp, loop);
    b.emit(emit::li(counter_reg(l), 0));
    for (uint32_t i = 0; i < ops; ++i) {
      if (lv.stride_bytes[i] != 0) {
        b.emit(emit::addi(operand_reg(i), operand_reg(i), -static_cast<int64_t>(lv.count) * lv.stride_bytes[i]));
      }
    }
  }
  b.jump(loop);  // not reached: the item count ends the loop first
  b.bind(done);
  if (nest.after) nest.after(b);
  b.emit(emit::wait_tags((1u << hw::kNumDmaTags) - 1));
}

}  // namespace spyre::compiler::schedule
