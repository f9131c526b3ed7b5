// Time bases and the bandwidth/latency server that every shared resource (memory, ring, PCIe)
// uses: a request waits for the resource to be free, occupies it for bytes / bandwidth, and
// its last byte arrives `latency` later. No per-cycle ticking.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#define SC_INCLUDE_DYNAMIC_PROCESSES
#include <systemc>
#include <tlm>

#include "spyre/hw/errors.h"

namespace spyre::sim {

/// Converts between device cycles and SystemC time for one clock.
class Clock {
 public:
  explicit Clock(uint32_t mhz) : mhz_(mhz), max_ps_((UINT64_MAX - 1) / mhz) {}
  sc_core::sc_time cycles(uint64_t n) const {
    // Building an sc_time from a double costs more than the rest of a simple instruction's step;
    // the same few counts recur, so the last one per slot is kept.
    Memo& m = memo_[n % kMemo];
    if (m.n != n || !m.valid) m = {n, true, sc_core::sc_time(static_cast<double>(n) * 1e6 / mhz_, sc_core::SC_PS)};
    return m.t;
  }
  /// Whole cycles in `t`: floor(ps * MHz / 10^6 + 10^-6), in integers (sc_time's value is picoseconds).
  uint64_t to_cycles(const sc_core::sc_time& t) const {
    // 64-bit arithmetic while the product fits (the first 12,000 s of simulated time at 1.5 GHz):
    // a 128-bit division is a library call, and this runs several times per instruction.
    const uint64_t ps = t.value();
    if (ps <= max_ps_) return (ps * mhz_ + 1) / 1'000'000;
    return static_cast<uint64_t>((static_cast<unsigned __int128>(ps) * mhz_ + 1) / 1'000'000);
  }
  uint64_t now_cycles() const { return to_cycles(sc_core::sc_time_stamp()); }
  uint32_t mhz() const { return mhz_; }

 private:
  static constexpr uint64_t kMemo = 8;
  struct Memo {
    uint64_t n = 0;
    bool valid = false;
    sc_core::sc_time t;
  };
  uint32_t mhz_;
  uint64_t max_ps_;           // the last picosecond whose product with mhz_ fits 64 bits
  mutable Memo memo_[kMemo];  // the simulator thread's alone, like every Clock
};

/// A shared resource with a bandwidth: a request waits for the resource to be free, then occupies
/// it for bytes / bandwidth. Latency is the caller's to add. Times are integer picoseconds
/// (SystemC's resolution), so that booking builds no sc_time.
class BandwidthServer {
 public:
  /// `bytes_per_ns` is the sustained bandwidth (GB/s).
  explicit BandwidthServer(double bytes_per_ns) : ps_per_byte_(1000.0 / bytes_per_ns) {}

  /// Reserves the resource for `bytes`, starting no earlier than `at_ps`; returns when the last
  /// byte has passed.
  uint64_t reserve_ps(uint64_t at_ps, uint64_t bytes) {
    const uint64_t start = at_ps > next_free_ ? at_ps : next_free_;
    const auto occupy = static_cast<uint64_t>(static_cast<double>(bytes) * ps_per_byte_ + 0.5);
    next_free_ = start + occupy;
    busy_ += occupy;
    bytes_ += bytes;
    return next_free_;
  }
  sc_core::sc_time reserve(const sc_core::sc_time& at, uint64_t bytes) {
    return sc_core::sc_time::from_value(reserve_ps(at.value(), bytes));
  }

  uint64_t bytes() const { return bytes_; }
  /// Picoseconds during which the resource moved data.
  uint64_t busy_ps() const { return busy_; }

 private:
  double ps_per_byte_;
  uint64_t next_free_ = 0;
  uint64_t busy_ = 0;
  uint64_t bytes_ = 0;
};

/// A resource that independent initiators book ahead of time (a PCIe link, which a card's own DMA,
/// its descriptor fetches and other cards' peer writes share; the switch's crossbar and upstream
/// port): its bandwidth is cut into 1 us slots, and a request fills the free capacity of the slots
/// from its start on. A DMA engine books a whole copy at once, far ahead of simulated time; with
/// BandwidthServer's single next-free time, a 64-byte descriptor fetch booked a moment later for
/// now would wait behind all of it, where the link interleaves their packets. A slot fills from its
/// start: a booking that starts mid-slot counts the slot's earlier part as used, so a later booking
/// for that earlier moment goes after it (an error below 1 us per booking).
class FluidServer {
 public:
  explicit FluidServer(double bytes_per_ns)
      : ps_per_byte_(1000.0 / bytes_per_ns), slot_bytes_(bytes_per_ns * static_cast<double>(kSlotPs) / 1000.0) {}

  /// Reserves `bytes` from `at_ps` on; returns when the last of them has passed.
  uint64_t reserve_ps(uint64_t at_ps, uint64_t bytes) {
    if (bytes == 0) return at_ps;
    busy_ += static_cast<uint64_t>(static_cast<double>(bytes) * ps_per_byte_ + 0.5);
    bytes_ += bytes;
    const uint64_t now_slot = sc_core::sc_time_stamp().value() / kSlotPs;
    while (!used_.empty() && used_.begin()->first < now_slot) used_.erase(used_.begin());  // the past
    double left = static_cast<double>(bytes);
    uint64_t slot = at_ps / kSlotPs;
    // The first slot offers only what is left of it after at_ps.
    double from = static_cast<double>(at_ps % kSlotPs) / static_cast<double>(kSlotPs) * slot_bytes_;
    for (;; ++slot, from = 0) {
      double& used = used_[slot];
      const double start = std::max(used, from);
      const double take = std::min(left, slot_bytes_ - start);
      if (take <= 0) continue;
      used = start + take;
      left -= take;
      if (left <= 0) {
        return slot * kSlotPs + static_cast<uint64_t>(used / slot_bytes_ * static_cast<double>(kSlotPs) + 0.5);
      }
    }
  }
  /// A transfer of one packet, which the resource interleaves with the transfers booked before it
  /// (a link arbitrates packet by packet): it waits for none of them. Returns when it has passed.
  uint64_t pass_ps(uint64_t at_ps, uint64_t bytes) {
    const auto occupy = static_cast<uint64_t>(static_cast<double>(bytes) * ps_per_byte_ + 0.5);
    busy_ += occupy;
    bytes_ += bytes;
    return at_ps + occupy;
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t busy_ps() const { return busy_; }

 private:
  static constexpr uint64_t kSlotPs = 1'000'000;
  double ps_per_byte_;
  double slot_bytes_;
  std::map<uint64_t, double> used_;  // slot -> bytes booked in it (filled from its start)
  uint64_t busy_ = 0;
  uint64_t bytes_ = 0;
};

/// Rows of device memory, `count` rows of `bytes` each: row r at list[r] when a list is given (the
/// indices of a GATHER or SCATTER), else at base + r * stride (a strided LOAD or STORE, whose rows
/// ascend and are never written out one by one: checking the first and the last checks them all).
struct Rows {
  const uint64_t* list = nullptr;
  uint64_t base = 0, stride = 0;
  uint64_t count = 0, bytes = 0;
  static Rows strided(uint64_t base, uint64_t stride, uint64_t count, uint64_t bytes) {
    Rows r;
    r.base = base;
    r.stride = stride;
    r.count = count;
    r.bytes = bytes;
    return r;
  }
  static Rows listed(const uint64_t* list, uint64_t count, uint64_t bytes) {
    Rows r;
    r.list = list;
    r.count = count;
    r.bytes = bytes;
    return r;
  }
  uint64_t at(uint64_t r) const { return list ? list[r] : base + r * stride; }
};

/// The Spyre attributes of a device-memory access: its rows (row r at rows.at(r) in device memory
/// and at data + r * rows.bytes) and the ring stop of the initiator, which decides the links the
/// bytes cross. The target moves every row or, if any lies out of range, none, and books all rows
/// from the same start (latency paid once, bandwidth per row).
struct RowList : tlm::tlm_extension<RowList> {
  Rows rows;
  uint32_t stop = 0;           // the initiator's ring stop (Fabric::core_stop, Fabric::pcie_stop)
  bool book = true;            // false: the bytes ride on a transfer already booked (a multicast on the ring)
  bool data = true;            // false: the target checks and books the rows but moves no byte (timing mode)
  bool kept = false;           // a write whose bytes stay unchanged where they are (HostLink::keeps_bytes)
  bool* ring_bound = nullptr;  // set by the target: whether a ring link, not a channel, limited it
  /// For a read: when set, the target books the time and checks the rows but moves no byte; it
  /// appends where the rows' bytes are now (host pointers and lengths, in order) for the initiator
  /// to copy later. Those bytes stay as they are until the copy is done or the target is told
  /// before anything writes them (DeviceMemory::set_write_guard).
  std::vector<std::pair<const uint8_t*, uint64_t>>* deferred = nullptr;
  tlm::tlm_extension_base* clone() const override { return new RowList(*this); }
  void copy_from(const tlm::tlm_extension_base& other) override { *this = static_cast<const RowList&>(other); }
};

/// The response that marks a read of device memory with an uncorrectable ECC error (an address
/// outside memory answers TLM_ADDRESS_ERROR_RESPONSE).
inline constexpr tlm::tlm_response_status kEccErrorResponse = tlm::TLM_GENERIC_ERROR_RESPONSE;
/// The response that marks a write the simulator could not back with host memory (not a fault of
/// the modelled card: see sim.host_memory_bytes).
inline constexpr tlm::tlm_response_status kHostMemoryResponse = tlm::TLM_COMMAND_ERROR_RESPONSE;

/// The error code a failed access of device memory reports: what its response names, else `other`.
inline hw::ErrorCode memory_error(tlm::tlm_response_status status, hw::ErrorCode other) {
  if (status == kEccErrorResponse) return hw::ErrorCode::kEccError;
  if (status == kHostMemoryResponse) return hw::ErrorCode::kHostMemory;
  return other;
}

/// The rows of `list` (see RowList) in one blocking access: `data` holds them back to back.
/// `status`, when given, receives the target's response.
template <typename Socket>
bool tlm_access_rows(Socket& socket, tlm::tlm_command cmd, RowList& list, uint8_t* data, sc_core::sc_time& delay,
                     tlm::tlm_response_status* status = nullptr) {
  const Rows& rows = list.rows;
  const uint64_t n = rows.count * rows.bytes;
  if (rows.count == 0 || rows.bytes == 0 || n / rows.count != rows.bytes || n > UINT32_MAX) return false;
  tlm::tlm_generic_payload gp;
  gp.set_command(cmd);
  gp.set_address(rows.at(0));
  gp.set_data_ptr(data);
  gp.set_data_length(static_cast<unsigned>(n));
  gp.set_streaming_width(static_cast<unsigned>(n));
  gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  gp.set_extension(&list);
  socket->b_transport(gp, delay);
  gp.clear_extension(&list);
  if (status) *status = gp.get_response_status();
  return gp.is_response_ok();
}

/// One blocking access of `n` bytes at `addr` from ring stop `stop`; `delay` is annotated by the
/// target. Returns false on an error response (for example an address outside device memory).
template <typename Socket>
bool tlm_access(Socket& socket, tlm::tlm_command cmd, uint64_t addr, uint8_t* data, uint64_t n, sc_core::sc_time& delay,
                uint32_t stop, tlm::tlm_response_status* status = nullptr, bool move = true, bool kept = false) {
  RowList list;
  list.rows = Rows::strided(addr, 0, 1, n);
  list.stop = stop;
  list.data = move;
  list.kept = kept;
  return tlm_access_rows(socket, cmd, list, data, delay, status);
}

}  // namespace spyre::sim
