// A core's data movement: LOAD and STORE (strided rows), LOAD_MULTICAST and the indirect GATHER
// and SCATTER, each booked on the ring and the memory channels (Fabric) and tagged for WAIT.
#include "core.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "latency.h"
#include "sfp.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/regs.h"
#include "tile_math.h"

namespace spyre::sim {

namespace {
// The d rows of a LOAD or STORE in device memory; false when the arithmetic wraps around (it
// would land somewhere valid: fault instead). Rows that follow each other in device memory come
// back as one row of all their bytes: the same bytes, and the same time, since the memory server
// takes rows back to back and pays its latency once either way.
bool strided_rows(const hw::Instr& in, uint64_t base_reg, Rows& rows) {
  const uint64_t count = in.d, row_bytes = in.e;
  uint64_t base = 0, span = 0, last = 0;
  if (count == 0 || row_bytes == 0 || __builtin_add_overflow(base_reg, in.b, &base) ||
      __builtin_mul_overflow(count - 1, in.c, &span) || __builtin_add_overflow(base, span, &last) ||
      __builtin_add_overflow(last, row_bytes, &last)) {
    return false;
  }
  rows = in.c == row_bytes && count * row_bytes <= UINT32_MAX ? Rows::strided(base, 0, 1, count * row_bytes)
                                                              : Rows::strided(base, in.c, count, row_bytes);
  return true;
}
}  // namespace

bool Core::dma(const hw::Instr& in) {
  uint8_t* buf = lx(in, in.a, uint64_t{in.d} * in.e);
  Rows rows;
  if (!buf || !strided_rows(in, regs_[hw::reg_rd(in.regs)], rows)) return false;
  return transfer(in, rows, buf, in.op == hw::Op::kLoad ? Move::kRead : Move::kWrite);
}

bool Core::multicast(const hw::Instr& in) {
  // Every receiving rank is checked before any byte moves.
  const uint64_t set = regs_[hw::reg_rl(in.regs)];
  const uint64_t first = set & 0xffff, stride = set >> 16 & 0xffff, count = set >> 32 & 0xffff;
  const uint64_t bytes = uint64_t{in.d} * in.e;
  if (set >> 48 || count == 0 || !launch_ || first + (count - 1) * stride >= launch_->size()) return false;
  std::vector<uint8_t*> dst(count);
  for (uint64_t i = 0; i < count; ++i) {
    dst[i] = launch_->rank(static_cast<uint32_t>(first + i * stride)).scratchpad(in.a, bytes);
    if (!dst[i]) return false;
  }
  Rows rows;
  if (!strided_rows(in, regs_[hw::reg_rd(in.regs)], rows)) return false;
  sync_to_book();
  for (uint64_t i = 0; i < count; ++i)
    launch_->rank(static_cast<uint32_t>(first + i * stride)).settle(dst[i], bytes, true);
  // The rows land in the first receiver and are copied on as the ring passes the others.
  if (!transfer(in, rows, dst[0], Move::kRead)) return false;
  for (uint64_t i = 1; moves_bytes(in) && i < count; ++i) {
    if (dst[i] != dst[0]) std::memcpy(dst[i], dst[0], bytes);
  }
  return true;
}

bool Core::indirect(const hw::Instr& in) {
  // Every index is checked before any byte moves, so a bad one faults with memory untouched.
  const uint64_t rows = in.d, row_bytes = in.e, stride = in.c & 0xffffffffu;
  uint8_t* buf = scratchpad(in.a, rows * row_bytes);
  uint8_t* idx = scratchpad(in.c >> 32, rows * 8);
  const hw::ScatterReduce reduce = in.op == hw::Op::kScatter ? hw::scatter_reduce(in.flags) : hw::ScatterReduce::kNone;
  if (reduce == hw::ScatterReduce::kInvalid) return false;
  const bool add = reduce != hw::ScatterReduce::kNone;
  if (rows == 0 || row_bytes == 0 || !buf || !idx) return false;
  if (add && (in.dtype >= hw::DType::kCount || row_bytes % hw::dtype_size(in.dtype))) {
    return false;
  }
  pt_wait({{idx, rows * 8, !values_}});
  sync_to_book();
  // The indices: a replay in timing mode puts the captured run's in place of the scratchpad's (its
  // cores computed no values, and nothing reads them but this); a captured run records them.
  settle(idx, rows * 8, !values_);
  if (!values_) tape_->play(id_, idx, rows * 8);
  if (tape_) tape_->record(id_, idx, rows * 8);
  const uint64_t limit = regs_[hw::reg_rl(in.regs)];
  uint64_t base = 0;
  if (__builtin_add_overflow(regs_[hw::reg_rd(in.regs)], in.b, &base)) return false;
  std::vector<uint64_t> addrs(rows);
  for (uint64_t r = 0; r < rows; ++r) {
    int64_t i;
    std::memcpy(&i, idx + 8 * r, 8);
    uint64_t off = 0;
    if (i < 0 || static_cast<uint64_t>(i) >= limit || __builtin_mul_overflow(static_cast<uint64_t>(i), stride, &off) ||
        __builtin_add_overflow(base, off, &addrs[r])) {
      return false;
    }
  }
  return transfer(in, Rows::listed(addrs.data(), rows, row_bytes), buf,
                  in.op == hw::Op::kGather ? Move::kRead : (add ? Move::kAccumulate : Move::kWrite));
}

bool Core::sanitized(const Rows& rows, bool read, bool accumulate) {
  const RaceLog::Kind kind = accumulate ? RaceLog::Kind::kAccumulate
                             : read     ? RaceLog::Kind::kRead
                                        : RaceLog::Kind::kWrite;
  const uint64_t checks = launch_ ? launch_->checks() : 0;
  RaceLog* race = (checks & hw::kSanitizeRacecheck) ? &launch_->races() : nullptr;
  SanitizerReport report;
  if (sanitizer_->check(rows, kind, checks, rank_, id_, at_, race, &report)) return true;
  sanitizer_->set_report(id_, report);
  fault_code_ = hw::ErrorCode::kSanitizerReport;
  return false;
}

bool Core::transfer(const hw::Instr& in, const Rows& rows, uint8_t* buf, Move move) {
  // Every row is checked before any byte moves; the first and last of strided rows check them all.
  const uint64_t row_bytes = rows.bytes;
  const uint64_t first = rows.at(0), last = rows.at(rows.count - 1);
  // Where the rows land in (or leave) the scratchpad, for the trace (a multicast's receivers use
  // the same address).
  const uint64_t lx_at = buf >= lx_.get() && buf <= lx_.get() + lx_bytes_ ? static_cast<uint64_t>(buf - lx_.get()) : 0;
  if (rows.list) {
    for (uint64_t r = 0; r < rows.count; ++r) {
      if (!in_window(rows.list[r], row_bytes)) return false;
    }
  } else if (!in_window(first, row_bytes) || !in_window(last, row_bytes)) {
    return false;
  }
  if (sanitizer_ && ((launch_ && launch_->checks() != 0) || sanitizer_->watching()) &&
      !sanitized(rows, move == Move::kRead, move == Move::kAccumulate)) {
    return false;
  }
  const uint64_t total = rows.count * row_bytes;
  pt_wait({{buf, total, move == Move::kRead}});
  sync_to_book();
  // A LOAD's copy is posted to the worker after the other arithmetic of this core (so it needs no
  // settling here); every other transfer moves its bytes now.
  const bool bytes = moves_bytes(in);
  const bool deferred = move == Move::kRead && in.op == hw::Op::kLoad && bytes;
  if (!deferred) settle(buf, total, move == Move::kRead);  // multicast settled its receivers
  // The data moves now; its time is booked on the memory and ring servers from the issue cycle.
  // Rows are issued back to back: memory bandwidth spaces them, its latency is paid once. An
  // accumulating row is read and written at the memory (two LPDDR5 accesses, one ring transfer).
  const uint64_t begin = now();
  issue_ = functional_ ? 1 : config_.chip.issue_cycles;
  const sc_core::sc_time issue = clock_.cycles(issue_);
  // NOLINTNEXTLINE(performance-unnecessary-copy-initialization): a copy, the time as it is now
  const sc_core::sc_time now = sc_core::sc_time_stamp();
  sc_core::sc_time mem_delay = issue;
  bool ring = false;                // whether a ring link rather than a memory channel set the arrival
  if (move != Move::kAccumulate) {  // every row in one transaction: all of them move, or none
    RowList list;
    list.ring_bound = &ring;
    list.rows = rows;
    list.stop = stop_;
    list.data = bytes;
    std::vector<std::pair<const uint8_t*, uint64_t>> chunks;
    if (deferred) list.deferred = &chunks;
    tlm::tlm_response_status status = tlm::TLM_OK_RESPONSE;
    if (!tlm_access_rows(mem, move == Move::kRead ? tlm::TLM_READ_COMMAND : tlm::TLM_WRITE_COMMAND, list, buf,
                         mem_delay, &status)) {
      fault_code_ = memory_error(status, fault_code_);
      return false;
    }
    if (deferred) {
      compute(
          [buf, chunks = std::move(chunks)] {
            uint8_t* at = buf;
            for (const auto& [p, n] : chunks) {
              std::memcpy(at, p, n);
              at += n;
            }
          },
          {{buf, total, true}});
      worker_.note_device_read(lane_, last_ticket_, first, last + row_bytes);
    }
  }
  std::vector<uint8_t> row(move == Move::kAccumulate ? row_bytes : 0);
  for (uint64_t r = 0; move == Move::kAccumulate && r < rows.count; ++r) {
    uint8_t* data = buf + r * row_bytes;
    // Read and write both booked from the issue: latency once.
    sc_core::sc_time read_delay = issue, write_delay = issue;
    tlm::tlm_response_status status = tlm::TLM_OK_RESPONSE;
    if (!tlm_access(mem, tlm::TLM_READ_COMMAND, rows.at(r), row.data(), row_bytes, read_delay, stop_, &status, bytes)) {
      fault_code_ = memory_error(status, fault_code_);
      return false;
    }
    const uint64_t n = row_bytes / hw::dtype_size(in.dtype);
    const hw::ScatterReduce reduce = hw::scatter_reduce(in.flags);
    const hw::BinaryFn fn = reduce == hw::ScatterReduce::kMul   ? hw::BinaryFn::kMul
                            : reduce == hw::ScatterReduce::kMax ? hw::BinaryFn::kMax
                            : reduce == hw::ScatterReduce::kMin ? hw::BinaryFn::kMin
                                                                : hw::BinaryFn::kAdd;
    if (bytes) {
      sfp_binary(fn, in.dtype, row.data(), row.data(), hw::Bcast::kFull, data, hw::Bcast::kFull, 0, 1, n);
    }
    if (!tlm_access(mem, tlm::TLM_WRITE_COMMAND, rows.at(r), row.data(), row_bytes, write_delay, stop_, &status,
                    bytes)) {
      fault_code_ = memory_error(status, fault_code_);
      return false;
    }
    mem_delay = std::max({mem_delay, read_delay, write_delay});
  }
  const bool load = move == Move::kRead;
  const sc_core::sc_time done = now + mem_delay;  // the fabric booked the channels and the ring
  (load ? stats_.bytes_loaded : stats_.bytes_stored) += total;
  const char* name = in.op == hw::Op::kGather          ? "gather"
                     : in.op == hw::Op::kScatter       ? "scatter"
                     : in.op == hw::Op::kLoadMulticast ? "load multicast"
                     : load                            ? "load"
                                                       : "store";
  if (in.flags & hw::kDmaAsync) {
    const uint32_t t = hw::dma_tag(in.flags);
    if (done > tag_done_[t]) tag_ring_[t] = ring;  // the tag waits for its latest transfer
    tag_done_[t] = std::max(tag_done_[t], done);
    local_ += issue;  // booked at the true time (synced above); the rest is the core's own time
    if (trace_.instructions()) {
      trace_.slice(track_, std::string(name) + " issue", begin, this->now(),
                   {{"bytes", total},
                    {"tag", hw::dma_tag(in.flags)},
                    {"instruction", at_},
                    {"lx", lx_at},
                    {"addr", first},
                    {"rows", rows.count},
                    {"row_bytes", row_bytes}});
    }
    return true;
  }
  local_ += done - now;
  const uint64_t end = this->now();
  stall_ = ring ? Stall::kRing : Stall::kMemory;
  if (trace_.instructions()) {
    trace_.slice(track_, name, begin, end,
                 {{"bytes", total},
                  {"instruction", at_},
                  {"lx", lx_at},
                  {"addr", first},
                  {"rows", rows.count},
                  {"row_bytes", row_bytes}});
  }
  return true;
}

}  // namespace spyre::sim
