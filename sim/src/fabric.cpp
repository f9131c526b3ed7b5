#include "fabric.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

namespace spyre::sim {

Fabric::Fabric(const Config& c)
    : interleave_(c.memory.interleave_bytes),
      controllers_(c.memory.controllers),
      hashed_(c.memory.channel_hash == "xor"),
      functional_(c.sim.mode == "functional"),
      memory_latency_ps_(uint64_t{c.memory.latency_ns} * 1000),
      hop_ps_(static_cast<uint64_t>(std::llround(c.ring.hop_cycles * 1e6 / c.chip.clock_mhz))) {
  while ((1u << channel_bits_) < c.memory.channels) ++channel_bits_;
  if ((interleave_ & (interleave_ - 1)) == 0) shift_ = __builtin_ctzll(interleave_);
  fold_halves_ = (1u << channel_bits_) == c.memory.channels && channel_bits_ > 0 &&
                 (channel_bits_ & (channel_bits_ - 1)) == 0 && channel_bits_ <= 32;
  hw::RingStops ring = hw::ring_stops(c.chip.cores, controllers_);
  stops_ = ring.count;
  core_stops_ = std::move(ring.cores);
  controller_stops_ = std::move(ring.controllers);
  const double link_bytes_per_ns = c.ring.bytes_per_cycle * (c.chip.clock_mhz / 1000.0);
  channels_.assign(c.memory.channels, BandwidthServer(c.memory.bandwidth_gbps / c.memory.channels));
  clockwise_.assign(stops(), BandwidthServer(link_bytes_per_ns));
  counter_.assign(stops(), BandwidthServer(link_bytes_per_ns));
  bytes_per_channel_.assign(c.memory.channels, 0);
  row_counts_.assign(4ull * c.memory.channels, 0);
  for (uint32_t ch = 0; ch < c.memory.channels; ++ch) controller_of_.push_back(controller_of(ch));
  linear_ = hashed_ || (c.memory.channels & (c.memory.channels - 1)) == 0;
  bytes_per_controller_.assign(controllers_, 0);
  clockwise_bytes_.assign(stops(), 0);
  counter_bytes_.assign(stops(), 0);
}

uint32_t Fabric::channel_of(uint64_t addr) const {
  return channel_of_granule(granule(addr));
}

uint32_t Fabric::channel_of_granule(uint64_t g) const {
  if (!hashed_) return static_cast<uint32_t>(g % channels_.size());
  // XOR-fold every channel_bits_-bit digit of the granule index: rows a power of two apart, which
  // plain interleaving sends to one channel, spread over all; C aligned granules still cover each
  // of the C channels once.
  const uint64_t mask = channels_.size() - 1;
  if (fold_halves_) {
    for (uint32_t s = 32; s >= channel_bits_; s >>= 1) g ^= g >> s;
    return static_cast<uint32_t>(g & mask);
  }
  uint64_t h = 0;
  for (; g != 0; g >>= channel_bits_) h ^= g & mask;
  return static_cast<uint32_t>(h);
}

void Fabric::spread(uint64_t addr, uint64_t n) {
  if (n == 0) return;
  const uint64_t channels = channels_.size();
  const uint64_t first = granule(addr), last = granule(addr + n - 1);
  const auto add = [&](uint64_t g, uint64_t bytes) { bytes_per_channel_[channel_of_granule(g)] += bytes; };
  if (first == last) {
    add(first, n);
    return;
  }
  add(first, (first + 1) * interleave_ - addr);
  add(last, addr + n - last * interleave_);
  // The whole granules between: one at a time up to a multiple of the channel count, then whole
  // blocks of `channels` granules (one granule on every channel each), then the rest.
  uint64_t g = first + 1;
  for (; g < last && g % channels != 0; ++g) add(g, interleave_);
  const uint64_t blocks = (last - g) / channels;
  if (blocks > 0) {
    for (uint64_t& b : bytes_per_channel_) b += blocks * interleave_;
    g += blocks * channels;
  }
  for (; g < last; ++g) add(g, interleave_);
}

uint32_t Fabric::route(uint32_t from, uint32_t to, uint64_t bytes) {
  const uint32_t s = stops();
  const uint32_t cw = (to + s - from) % s;
  const bool clockwise = cw <= s - cw;  // the shorter way; clockwise on a tie
  const uint32_t hops = clockwise ? cw : s - cw;
  std::vector<uint64_t>& count = clockwise ? clockwise_bytes_ : counter_bytes_;
  std::vector<uint32_t>& touched = clockwise ? touched_cw_ : touched_ccw_;
  // Link i joins stops i and i + 1: clockwise from `from` crosses from, from + 1, ...;
  // counter-clockwise crosses from - 1, from - 2, ... (stepped and wrapped, not divided per hop).
  uint32_t link = clockwise ? from : (from + s - 1) % s;
  for (uint32_t h = 0; h < hops; ++h) {
    if (count[link] == 0) touched.push_back(link);
    count[link] += bytes;
    if (clockwise) {
      link = link + 1 == s ? 0 : link + 1;
    } else {
      link = link == 0 ? s - 1 : link - 1;
    }
  }
  byte_hops_ += bytes * hops;
  return hops;
}

namespace {
// The XOR of a granule index's Bits-bit digits, folded in halves (Fabric::channel_of_granule), with
// the shifts known at compile time.
template <uint32_t Bits>
uint64_t fold(uint64_t g) {
  for (uint32_t s = 32; s >= Bits; s >>= 1) g ^= g >> s;
  return g;
}

// Adds to counts[c] the rows g, g + step, ... (`rows` of them) whose channel is c. Four count arrays
// of `channels` each take every fourth row, so a run of rows on one channel is not one chain of
// dependent increments.
template <typename ChannelOf>
void count_rows(uint64_t g, uint64_t step, uint64_t rows, uint64_t channels, uint64_t* counts, ChannelOf channel_of) {
  uint64_t r = 0;
  for (; r + 4 <= rows; r += 4, g += 4 * step) {
    ++counts[channel_of(g)];
    ++counts[channels + channel_of(g + step)];
    ++counts[2 * channels + channel_of(g + 2 * step)];
    ++counts[3 * channels + channel_of(g + 3 * step)];
  }
  for (; r < rows; ++r, g += step) ++counts[channel_of(g)];
}
}  // namespace

void Fabric::count_channels(uint64_t g, uint64_t step, uint64_t rows, uint64_t* counts) const {
  const uint64_t channels = channels_.size(), mask = channels - 1;
  const auto hashed = [&](auto bits) {
    count_rows(g, step, rows, channels, counts, [mask](uint64_t x) { return fold<decltype(bits)::value>(x) & mask; });
  };
  if (hashed_ && fold_halves_ && channel_bits_ == 4) {
    hashed(std::integral_constant<uint32_t, 4>());
  } else if (hashed_ && fold_halves_ && channel_bits_ == 8) {
    hashed(std::integral_constant<uint32_t, 8>());
  } else if (hashed_ && fold_halves_ && channel_bits_ == 2) {
    hashed(std::integral_constant<uint32_t, 2>());
  } else {
    count_rows(g, step, rows, channels, counts, [this](uint64_t x) { return channel_of_granule(x); });
  }
  for (uint64_t c = 0; c < channels; ++c) {
    counts[c] += counts[channels + c] + counts[2 * channels + c] + counts[3 * channels + c];
    counts[channels + c] = counts[2 * channels + c] = counts[3 * channels + c] = 0;
  }
}

void Fabric::spread(const Rows& rows) {
  const uint64_t n = rows.bytes;
  // Strided rows that each sit inside one granule, a whole number of granules apart (a tile's rows
  // in a larger tensor): rows per channel, from the granule index of each row and nothing else.
  if (rows.list || shift_ < 0 || rows.stride % interleave_ != 0 || (rows.base & (interleave_ - 1)) + n > interleave_) {
    for (uint64_t r = 0; r < rows.count; ++r) spread(rows.at(r), n);
    return;
  }
  const uint64_t step = rows.stride >> shift_, g = rows.base >> shift_, channels = channels_.size();
  // When the channel is XOR-linear in the granule index (the xor hash, or plain interleaving over a
  // power of two), split g into its bits above k and below, with k the fewest bits that the rows'
  // low parts never carry out of. Every row's channel is then its low part's channel XOR that of
  // the high bits, so the rows per channel are a pattern of (low part, step, rows), kept, and only
  // permuted by the high bits: the same tile rows of every weight cost a lookup, not a row loop.
  if (linear_ && rows.count >= kPatternRows) {
    const uint64_t span = (rows.count - 1) * step;
    uint32_t k = 64 - static_cast<uint32_t>(__builtin_clzll(span | 1));
    while (k < 64 && ((g & ((uint64_t{1} << k) - 1)) + span) >> k) ++k;
    if (k < 64) {
      spread_pattern(g & ((uint64_t{1} << k) - 1), g, step, rows.count, n);
      return;
    }
  }
  uint64_t* counts = row_counts_.data();
  count_channels(g, step, rows.count, counts);
  for (uint64_t c = 0; c < channels; ++c) {
    bytes_per_channel_[c] += counts[c] * n;
    counts[c] = 0;
  }
}

void Fabric::spread_pattern(uint64_t low, uint64_t g, uint64_t step, uint64_t count, uint64_t n) {
  const uint64_t channels = channels_.size(), flip = channel_of_granule(g - low);
  if (patterns_.size() * channels >= kPatternEntries) {  // bounded: start again
    patterns_.clear();
    pattern_counts_.clear();
  }
  const auto [it, fresh] = patterns_.try_emplace(PatternKey{low, step, count}, pattern_counts_.size());
  if (fresh) {
    pattern_counts_.resize(pattern_counts_.size() + channels);
    count_channels(low, step, count, row_counts_.data());
    std::copy_n(row_counts_.begin(), channels, pattern_counts_.begin() + static_cast<ptrdiff_t>(it->second));
    std::fill_n(row_counts_.begin(), channels, 0);
  }
  const uint64_t* pattern = pattern_counts_.data() + it->second;
  for (uint64_t c = 0; c < channels; ++c) bytes_per_channel_[c ^ flip] += pattern[c] * n;
}

uint64_t Fabric::transfer(uint64_t at_ps, uint32_t stop, bool to_stop, const Rows& rows, bool* ring_bound) {
  if (ring_bound) *ring_bound = false;
  if (functional_ || rows.count == 0 || rows.bytes == 0) return at_ps;
  spread(rows);
  uint64_t end = at_ps;
  for (uint32_t c = 0; c < channels_.size(); ++c) {
    uint64_t& b = bytes_per_channel_[c];
    if (b == 0) continue;
    end = std::max(end, channels_[c].reserve_ps(at_ps, b));
    bytes_per_controller_[controller_of_[c]] += b;
    b = 0;
  }
  const uint64_t channels_end = end;
  uint32_t hops = 0;
  for (uint32_t mc = 0; mc < controllers_; ++mc) {
    uint64_t& b = bytes_per_controller_[mc];
    if (b == 0) continue;
    const uint32_t h = to_stop ? route(controller_stops_[mc], stop, b) : route(stop, controller_stops_[mc], b);
    hops = std::max(hops, h);
    b = 0;
  }
  for (const uint32_t link : touched_cw_) {
    end = std::max(end, clockwise_[link].reserve_ps(at_ps, clockwise_bytes_[link]));
    clockwise_bytes_[link] = 0;
  }
  for (const uint32_t link : touched_ccw_) {
    end = std::max(end, counter_[link].reserve_ps(at_ps, counter_bytes_[link]));
    counter_bytes_[link] = 0;
  }
  touched_cw_.clear();
  touched_ccw_.clear();
  if (ring_bound) *ring_bound = end > channels_end;
  return end + memory_latency_ps_ + hops * hop_ps_;
}

std::vector<Fabric::Link> Fabric::links() const {
  std::vector<Link> out;
  const uint32_t s = stops();
  for (uint32_t i = 0; i < s; ++i) {
    out.push_back({i, (i + 1) % s, true, &clockwise_[i]});
    out.push_back({(i + 1) % s, i, false, &counter_[i]});
  }
  return out;
}

}  // namespace spyre::sim
