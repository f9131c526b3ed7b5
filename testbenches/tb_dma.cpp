// Testbench of the DMA engine behind the PCIe endpoint: copies in every direction against the
// bytes written, durations against the PCIe and LPDDR5 bandwidth figures, and IOMMU faults.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "device_memory.h"
#include "dma_engine.h"
#include "endpoint.h"
#include "spyre/hw/pci.h"
#include "trace.h"

using namespace spyre;
using namespace spyre::sim;

namespace {

constexpr uint64_t kIova = 0x4000'0000;

// Host memory: one mapped window at kIova; everything else faults, like an IOMMU.
// With `keeps`, it keeps its bytes as a replay's capture does (HostLink::keeps_bytes).
struct FakeHost final : HostLink {
  std::vector<uint8_t> mem = std::vector<uint8_t>(8 << 20);
  bool keeps = false;
  bool dma_read(uint64_t iova, void* dst, uint64_t n) override {
    if (iova < kIova || iova + n > kIova + mem.size()) return false;
    std::memcpy(dst, &mem[iova - kIova], n);
    return true;
  }
  bool keeps_bytes() const override { return keeps; }
  const uint8_t* dma_kept(uint64_t iova, uint64_t n) override {
    return iova < kIova || iova + n > kIova + mem.size() ? nullptr : &mem[iova - kIova];
  }
  bool dma_write(uint64_t iova, const void* src, uint64_t n) override {
    if (iova < kIova || iova + n > kIova + mem.size()) return false;
    std::memcpy(&mem[iova - kIova], src, n);
    return true;
  }
  void raise_irq(uint32_t) override {}
};

// The host's end of BAR0; this testbench drives DMA, not registers. `probe` reads device memory
// as a core does.
struct HostSide : sc_core::sc_module {
  tlm_utils::simple_initiator_socket<HostSide> bar0{"bar0"};
  tlm_utils::simple_initiator_socket<HostSide> probe{"probe"};
  explicit HostSide(const sc_core::sc_module_name& name) : sc_core::sc_module(name) {}
};

struct Harness {
  Config config;
  Trace trace{config};
  CardStats stats;
  Fabric fabric{config};
  DeviceMemory memory{"memory", config, fabric};
  Server server{config};
  Endpoint endpoint{"pcie", config, 0, server, memory.size(), stats};
  DmaEngine dma{"dma", config, 0, endpoint, trace, stats};
  FakeHost host;
  HostSide host_side{"host"};
  Harness() {
    server.add_card(0, nullptr);  // no peer reaches this card's memory
    host_side.bar0.bind(endpoint.bar0);
    dma.mem.bind(memory.socket);
    host_side.probe.bind(memory.socket);
    endpoint.attach(&host);
    endpoint.cfg_write(hw::kCfgCommand, 2, hw::kCmdMemorySpace | hw::kCmdBusMaster);
    sc_core::sc_start(sc_core::SC_ZERO_TIME);  // elaborate
  }

  // Runs one copy on a SystemC thread; returns its verdict and duration in cycles.
  hw::Verdict copy(uint64_t src, uint64_t dst, uint64_t size, uint8_t flags, uint64_t* cycles = nullptr) {
    hw::Verdict v;
    const Clock clock(config.chip.clock_mhz);
    const uint64_t start = clock.now_cycles();
    sc_core::sc_spawn([&] { v = dma.copy(hw::CopyArgs{src, dst, size, {}}, flags, hw::kQPriorityNormal); });
    sc_core::sc_start();
    if (cycles) *cycles = clock.now_cycles() - start;
    return v;
  }
};
Harness* h = nullptr;

std::vector<uint8_t> random_bytes(size_t n) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

}  // namespace

TEST_CASE("host -> device -> device -> host moves the bytes unchanged") {
  const auto data = random_bytes((3 << 20) + 5);
  std::memcpy(h->host.mem.data(), data.data(), data.size());
  CHECK(h->copy(kIova, 0x100000, data.size(), hw::kCopySrcHost).ok());
  CHECK(h->copy(0x100000, 0x2000000, data.size(), 0).ok());
  std::fill(h->host.mem.begin(), h->host.mem.end(), 0);
  CHECK(h->copy(0x2000000, kIova + 7, data.size(), hw::kCopyDstHost).ok());
  CHECK(std::memcmp(h->host.mem.data() + 7, data.data(), data.size()) == 0);
  CHECK(h->stats.h2d_bytes == data.size());
  CHECK(h->stats.d2d_bytes == data.size());
  CHECK(h->stats.d2h_bytes == data.size());
}

TEST_CASE("zeros copied into never-written memory take no host memory and read back as zeros") {
  constexpr uint64_t kAt = 0x40000000;  // 1 GiB in: no case before wrote there
  const size_t n = (1 << 20) + 3;
  std::fill(h->host.mem.begin(), h->host.mem.end(), 0);
  const uint64_t before = h->memory.resident_bytes();
  CHECK(h->copy(kIova, kAt, n, hw::kCopySrcHost).ok());
  CHECK(h->memory.resident_bytes() == before);
  std::vector<uint8_t> back(n, 0xee);
  h->memory.read(kAt, back.data(), n);
  CHECK(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; }));
  // One byte that is not zero backs its page (64 KiB), and zeros written over a backed page land.
  const uint8_t one = 1, zero = 0;
  CHECK(h->memory.write(kAt + 5, &one, 1));
  CHECK(h->memory.resident_bytes() == before + (64 << 10));
  CHECK(h->memory.write(kAt + 5, &zero, 1));
  uint8_t got = 0xee;
  h->memory.read(kAt + 5, &got, 1);
  CHECK(got == 0);
}

TEST_CASE("a scrubbed page gives its host memory back and its slot comes back as zeros") {
  constexpr uint64_t kPage = 64 << 10;
  constexpr uint64_t kAt = 0x50000000, kElsewhere = 0x60000000;  // untouched by the cases before
  const uint64_t before = h->memory.resident_bytes();
  const std::vector<uint8_t> pattern(2 * kPage, 0xab);
  CHECK(h->memory.write(kAt, pattern.data(), pattern.size()));
  CHECK(h->memory.resident_bytes() == before + 2 * kPage);
  // The first page wholly, the second from its middle: one page freed, half of the other zeroed.
  h->memory.scrub(kAt, kPage + kPage / 2);
  CHECK(h->memory.resident_bytes() == before + kPage);
  std::vector<uint8_t> back(2 * kPage);
  h->memory.read(kAt, back.data(), back.size());
  CHECK(std::all_of(back.begin(), back.begin() + kPage + kPage / 2, [](uint8_t b) { return b == 0; }));
  CHECK(std::all_of(back.begin() + kPage + kPage / 2, back.end(), [](uint8_t b) { return b == 0xab; }));
  // A new page takes the freed slot: it holds the byte written and zeros, nothing of the pattern.
  const uint8_t one = 1;
  CHECK(h->memory.write(kElsewhere + 7, &one, 1));
  CHECK(h->memory.resident_bytes() == before + 2 * kPage);
  std::vector<uint8_t> fresh(kPage, 0xee);
  h->memory.read(kElsewhere, fresh.data(), kPage);
  CHECK(fresh[7] == 1);
  fresh[7] = 0;
  CHECK(std::all_of(fresh.begin(), fresh.end(), [](uint8_t b) { return b == 0; }));
  h->memory.scrub(kAt, 2 * kPage);
  h->memory.scrub(kElsewhere, kPage);
  CHECK(h->memory.resident_bytes() == before);
}

TEST_CASE("bytes the host keeps are written without backing pages and read back under later writes") {
  // A replay's capture keeps what the card reads: a copy from it backs no page, and every read
  // (functional, a device-to-host copy, a core's deferred load) sees it under what was written since.
  constexpr uint64_t kPage = 64 << 10;
  constexpr uint64_t kAt = 0x70000000, kBack = 0x80000000;  // untouched by the cases before
  const size_t n = 3 * kPage + 5;
  std::vector<uint8_t> want = random_bytes(n);
  std::memcpy(h->host.mem.data(), want.data(), n);
  h->host.keeps = true;
  const uint64_t before = h->memory.resident_bytes();
  CHECK(h->copy(kIova, kAt, n, hw::kCopySrcHost).ok());
  CHECK(h->memory.resident_bytes() == before);  // nothing copied into pages
  CHECK(h->memory.kept_ranges() > 0);
  // Written over in the middle of the first page and across the second and third: those pages are
  // backed, the rest is still read from the host's bytes.
  const std::vector<uint8_t> mid(kPage + 100, 0x5a);
  CHECK(h->memory.write(kAt + kPage / 2, mid.data(), mid.size()));
  std::copy(mid.begin(), mid.end(), want.begin() + kPage / 2);
  h->memory.scrub(kAt + 3 * kPage, 2);  // the last 5 bytes: 2 of them zeroed
  want[3 * kPage] = want[3 * kPage + 1] = 0;
  CHECK(h->memory.resident_bytes() == before + 2 * kPage);
  std::vector<uint8_t> got(n, 0xee);
  h->memory.read(kAt, got.data(), n);
  CHECK(got == want);
  // A copy to the host reads the same.
  h->host.keeps = false;
  CHECK(h->copy(kAt, kIova + (4 << 20), n, hw::kCopyDstHost).ok());
  CHECK(std::memcmp(h->host.mem.data() + (4 << 20), want.data(), n) == 0);
  // A core's load, deferred: where the bytes are, in order, from pages and from the host's bytes.
  std::vector<std::pair<const uint8_t*, uint64_t>> where;
  RowList list;
  list.rows = Rows::strided(kAt + 7, kPage, 3, kPage - 7);
  list.deferred = &where;
  std::vector<uint8_t> unused(list.rows.count * list.rows.bytes);
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  CHECK(tlm_access_rows(h->host_side.probe, tlm::TLM_READ_COMMAND, list, unused.data(), delay));
  std::vector<uint8_t> loaded;
  for (const auto& [p, len] : where) loaded.insert(loaded.end(), p, p + len);
  std::vector<uint8_t> rows;
  for (uint64_t r = 0; r < 3; ++r)
    rows.insert(rows.end(), want.begin() + 7 + r * kPage, want.begin() + (r + 1) * kPage);
  CHECK(loaded == rows);
  // A device-to-device copy, then the whole range scrubbed: nothing kept is left.
  CHECK(h->copy(kAt, kBack, n, 0).ok());
  std::vector<uint8_t> copied(n);
  h->memory.read(kBack, copied.data(), n);
  CHECK(copied == want);
  h->memory.scrub(kAt, n);
  h->memory.scrub(kBack, 4 * kPage);  // its last page wholly, so that it is given back
  CHECK(h->memory.kept_ranges() == 0);
  CHECK(h->memory.resident_bytes() == before);
  std::vector<uint8_t> zeros(n, 0xee);
  h->memory.read(kAt, zeros.data(), n);
  CHECK(std::all_of(zeros.begin(), zeros.end(), [](uint8_t b) { return b == 0; }));
}

TEST_CASE("a host copy takes its PCIe transfer time plus latency once") {
  // 1 MiB in 4096 packets of 256 bytes, each with 24 bytes of header and framing: 1146880 bytes at
  // 64 GB/s = 17920 ns; + 600 ns PCIe latency; + the last 64 KiB chunk into LPDDR5 (4096 bytes on
  // each of 16 channels at 12.8 GB/s = 320 ns, + 120 ns latency); + the hops from the PCIe stop to
  // the farthest memory controller, at most half the 37 stops. At 1.5 GHz: 26880 + 900 + 660 + 18.
  uint64_t cycles = 0;
  CHECK(h->copy(kIova, 0x100000, 1 << 20, hw::kCopySrcHost, &cycles).ok());
  CHECK(cycles >= 26880 + 900 + 660 - 2);
  CHECK(cycles <= 26880 + 900 + 660 + 18 + 2);
}

TEST_CASE("a link booked ahead still carries a transfer booked later for an earlier time") {
  // 64 GB/s = 64 bytes per ns. A copy booked for 10 us on carries 640 KB: it ends at 20 us. A 64 KiB
  // transfer booked afterwards for now ends at 1024 ns, before the first one starts: a single
  // next-free time (BandwidthServer) would put it after 20 us.
  FluidServer link(64.0);
  // From the next whole microsecond after the earlier cases' simulated time.
  const uint64_t t0 = (sc_core::sc_time_stamp().value() / 1'000'000 + 1) * 1'000'000;
  CHECK(link.reserve_ps(t0 + 10'000'000, 640'000) == t0 + 20'000'000);
  CHECK(link.reserve_ps(t0, 65536) == t0 + 1'024'000);
  // Capacity is kept: 640 KB more from 5 us fill 5..10 us (320 KB) and 20..25 us (the rest).
  CHECK(link.reserve_ps(t0 + 5'000'000, 640'000) == t0 + 25'000'000);
  CHECK(link.reserve_ps(t0 + 3'000'000, 0) == t0 + 3'000'000);  // nothing to carry: done at once
  // One packet slips between the packets already booked: 280 bytes take 4375 ps.
  CHECK(link.pass_ps(t0 + 12'000'000, 280) == t0 + 12'004'375);
  CHECK(link.bytes() == 640'000 + 65536 + 640'000 + 280);
  CHECK(link.busy_ps() == 10'000'000 + 1'024'000 + 10'000'000 + 4375);
}

TEST_CASE("a device-to-device copy reads and writes the same memory") {
  // 4 MiB read + 4 MiB written through one LPDDR5 server at 204.8 GB/s: ~40960 ns = 61440 cycles.
  uint64_t cycles = 0;
  CHECK(h->copy(0x100000, 0x3000000, 4 << 20, 0, &cycles).ok());
  CHECK(cycles >= 61440);
  CHECK(cycles <= 61440 + 400);  // + one memory latency and chunk pipelining
}

TEST_CASE("unmapped host addresses fault and name the side") {
  hw::Verdict v = h->copy(0x1000, 0x100000, 64, hw::kCopySrcHost);
  CHECK(v.error == hw::ErrorCode::kDmaFault);
  CHECK(v.field == hw::Field::kCopySrc);
  v = h->copy(0x100000, kIova + h->host.mem.size() - 8, 64, hw::kCopyDstHost);  // runs off the window
  CHECK(v.error == hw::ErrorCode::kDmaFault);
  CHECK(v.field == hw::Field::kCopyDst);
}

TEST_CASE("without bus mastering the endpoint refuses DMA") {
  h->endpoint.cfg_write(hw::kCfgCommand, 2, hw::kCmdMemorySpace);
  CHECK(h->copy(kIova, 0x100000, 64, hw::kCopySrcHost).error == hw::ErrorCode::kDmaFault);
  h->endpoint.cfg_write(hw::kCfgCommand, 2, hw::kCmdMemorySpace | hw::kCmdBusMaster);
  CHECK(h->copy(kIova, 0x100000, 64, hw::kCopySrcHost).ok());
}

TEST_CASE("strided rows book every channel and link as the same rows listed one by one") {
  // The strided form counts channels per row without looking at each row's granules; the listed
  // form spreads row by row. Both must give every server the same bytes and the same end time.
  struct Layout {
    uint32_t channels;
    uint64_t interleave;
    const char* hash;
  };
  std::mt19937_64 rng(7);
  for (const Layout& layout : {Layout{16, 256, "xor"}, Layout{256, 256, "xor"}, Layout{4, 64, "xor"},
                               Layout{8, 256, "xor"}, Layout{16, 256, "modulo"}, Layout{12, 128, "modulo"}}) {
    Config c;
    c.memory.channels = layout.channels;
    c.memory.interleave_bytes = layout.interleave;
    c.memory.channel_hash = layout.hash;
    Fabric strided{c}, listed{c};
    uint64_t at = 0, last_base = 0, bytes = 0, stride = 0, count = 0;
    for (int i = 0; i < 400; ++i) {
      if (i % 4 != 3) {
        bytes = 1 + rng() % (i % 2 ? layout.interleave : 3 * layout.interleave);
        const uint64_t granules = rng() % 300;  // row strides of whole granules, and not
        stride = granules * layout.interleave + (i % 5 == 0 ? rng() % layout.interleave : 0);
        count = 1 + rng() % 150;
      }
      uint64_t base = (rng() % (1ull << 34)) & ~uint64_t{i % 3 ? layout.interleave - 1 : 0};
      // Rows of the same tile shape in another tensor: the same low address bits, other high ones.
      if (i % 4 == 3) base = last_base + ((1 + rng() % 64) << 35);
      last_base = base;
      std::vector<uint64_t> addrs(count);
      for (uint64_t r = 0; r < count; ++r) addrs[r] = base + r * stride;
      const uint32_t stop = static_cast<uint32_t>(rng() % strided.stops());
      const uint64_t a = strided.transfer(at, stop, i % 2, Rows::strided(base, stride, count, bytes));
      const uint64_t b = listed.transfer(at, stop, i % 2, Rows::listed(addrs.data(), count, bytes));
      REQUIRE(a == b);
      at += rng() % 20000;
    }
    for (uint32_t ch = 0; ch < layout.channels; ++ch)
      CHECK(strided.channels()[ch].bytes() == listed.channels()[ch].bytes());
    const auto sl = strided.links(), ll = listed.links();
    for (size_t l = 0; l < sl.size(); ++l) CHECK(sl[l].server->bytes() == ll[l].server->bytes());
  }
}

extern "C" int sc_main(int argc, char* argv[]) {
  Harness harness;
  h = &harness;
  doctest::Context context(argc, argv);
  return context.run();
}
