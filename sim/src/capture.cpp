#include "capture.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#define SC_INCLUDE_DYNAMIC_PROCESSES
#include <systemc>

namespace spyre::sim {

namespace {

// File layout: the magic, a version, the config's length and text, then one fixed-size record
// per event (a DMA read's bytes right after its record). Little-endian, as the host.
constexpr char kMagic[8] = {'S', 'P', 'Y', 'R', 'E', 'C', 'A', 'P'};
constexpr uint32_t kVersion = 1;

struct Record {
  uint8_t kind;
  uint8_t ok;
  uint16_t reserved;
  uint32_t card;
  uint64_t time_ps, addr, value, size, hash;
};
static_assert(sizeof(Record) == 48);

uint64_t now_ps() {
  return sc_core::sc_time_stamp().value();
}

}  // namespace

uint64_t fnv1a(const void* p, uint64_t n, uint64_t h) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (uint64_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

// ---- Writing ------------------------------------------------------------------------------------

CaptureWriter::CaptureWriter(const std::string& path, const std::string& config_json)
    : path_(path), f_(std::fopen(path.c_str(), "wb")) {
  if (!f_) throw std::runtime_error(fmt::format("capture: cannot create '{}'", path));
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  const auto len = static_cast<uint32_t>(config_json.size());
  std::fwrite(kMagic, 1, sizeof kMagic, f_);
  std::fwrite(&kVersion, 4, 1, f_);
  std::fwrite(&len, 4, 1, f_);
  std::fwrite(config_json.data(), 1, len, f_);
}

CaptureWriter::~CaptureWriter() {
  std::fclose(f_);
}

void CaptureWriter::write(const CaptureEvent& e, const void* bytes) {
  const uint64_t last = e.kind == CaptureEvent::Kind::kPeer ? e.peer_addr : e.hash;
  const Record r{static_cast<uint8_t>(e.kind), e.ok, 0, e.card, e.time_ps, e.addr, e.value, e.size, last};
  std::fwrite(&r, sizeof r, 1, f_);
  if (e.has_bytes()) {
    if (bytes == nullptr) throw std::logic_error("capture: an event with bytes was written without them");
    std::fwrite(bytes, 1, e.size, f_);
  }
  if (std::ferror(f_)) throw std::runtime_error(fmt::format("capture: error writing '{}'", path_));
}

void CaptureWriter::flush() {
  std::fflush(f_);
}

CaptureEvent RecordingLink::event(CaptureEvent::Kind kind) const {
  CaptureEvent e;
  e.kind = kind;
  e.card = card_;
  e.time_ps = now_ps();
  return e;
}

bool RecordingLink::dma_read(uint64_t iova, void* dst, uint64_t n) {
  const bool ok = inner_ && inner_->dma_read(iova, dst, n);
  CaptureEvent e = event(CaptureEvent::Kind::kDmaRead);
  e.ok = ok;
  e.addr = iova;
  e.size = n;
  writer_.write(e, dst);
  return ok;
}

bool RecordingLink::dma_write(uint64_t iova, const void* src, uint64_t n) {
  const bool ok = inner_ && inner_->dma_write(iova, src, n);
  CaptureEvent e = event(CaptureEvent::Kind::kDmaWrite);
  e.ok = ok;
  e.addr = iova;
  e.size = n;
  e.hash = fnv1a(src, n);
  writer_.write(e);
  return ok;
}

bool RecordingLink::peer_window(uint64_t iova, uint64_t n, uint32_t* card, uint64_t* addr) {
  if (!inner_ || !inner_->peer_window(iova, n, card, addr)) return false;
  CaptureEvent e = event(CaptureEvent::Kind::kPeer);
  e.addr = iova;
  e.size = n;
  e.value = *card;
  e.peer_addr = *addr;
  writer_.write(e);
  return true;
}

void RecordingLink::raise_irq(uint32_t vector) {
  CaptureEvent e = event(CaptureEvent::Kind::kIrq);
  e.value = vector;
  writer_.write(e);
  if (inner_) inner_->raise_irq(vector);
}

void RecordingTape::record(uint32_t core, const uint8_t* indices, uint64_t n) {
  CaptureEvent e;
  e.kind = CaptureEvent::Kind::kIndices;
  e.card = card_;
  e.time_ps = now_ps();
  e.value = core;
  e.size = n;
  writer_.write(e, indices);
}

// ---- Reading ------------------------------------------------------------------------------------

Capture Capture::load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(fmt::format("capture: cannot read '{}'", path));
  struct stat st = {};
  const bool sized = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const auto file_bytes = sized ? static_cast<uint64_t>(st.st_size) : 0;
  void* map = file_bytes > 0 ? ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (!sized) throw std::runtime_error(fmt::format("capture: '{}' is not a regular file", path));
  if (file_bytes == 0) throw std::runtime_error(fmt::format("capture: '{}' is not a Spyre capture file", path));
  if (map == MAP_FAILED) throw std::runtime_error(fmt::format("capture: cannot map '{}'", path));
  ::madvise(map, file_bytes, MADV_SEQUENTIAL);
  // Mapped, not read: a file another process truncates while it is replayed ends the replay with
  // SIGBUS, as for any mapped file; captures are written once and then only read.
  Capture c;
  c.file_ =
      std::shared_ptr<const void>(map, [file_bytes](const void* p) { ::munmap(const_cast<void*>(p), file_bytes); });
  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t at = 0;
  // Copies the next n bytes of the file to dst, or says that the file ends first.
  const auto take = [&](void* dst, uint64_t n) {
    if (n > file_bytes - at) return false;
    std::memcpy(dst, bytes + at, n);
    at += n;
    return true;
  };
  char magic[8] = {};
  uint32_t version = 0, len = 0;
  if (!take(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) {
    throw std::runtime_error(fmt::format("capture: '{}' is not a Spyre capture file", path));
  }
  if (!take(&version, 4) || version != kVersion) {
    throw std::runtime_error(
        fmt::format("capture: '{}' has version {}, this simulator reads {}", path, version, kVersion));
  }
  if (!take(&len, 4) || len > file_bytes - at) {
    throw std::runtime_error(fmt::format("capture: '{}' is truncated", path));
  }
  c.config_json.assign(reinterpret_cast<const char*>(bytes + at), len);
  at += len;
  Record r;
  while (take(&r, sizeof r)) {
    if (r.kind > static_cast<uint8_t>(CaptureEvent::Kind::kPeer)) {
      throw std::runtime_error(fmt::format("capture: '{}' has an event of unknown kind {}", path, r.kind));
    }
    CaptureEvent e;
    e.kind = static_cast<CaptureEvent::Kind>(r.kind);
    e.ok = r.ok != 0;
    e.card = r.card;
    e.time_ps = r.time_ps;
    e.addr = r.addr;
    e.value = r.value;
    e.size = r.size;
    (e.kind == CaptureEvent::Kind::kPeer ? e.peer_addr : e.hash) = r.hash;
    // A launch's core mask has 64 bits: no core of a card is numbered beyond them.
    if (e.kind == CaptureEvent::Kind::kPeer && e.value >= 16) {  // sim.devices allows 16 cards
      throw std::runtime_error(fmt::format("capture: '{}' has DMA to card {}; a server has at most 16", path, e.value));
    }
    if (e.kind == CaptureEvent::Kind::kIndices && e.value >= 64) {
      throw std::runtime_error(
          fmt::format("capture: '{}' has indices of core {}; a card has at most 64", path, e.value));
    }
    if (e.has_bytes()) {
      if (e.size > file_bytes - at) throw std::runtime_error(fmt::format("capture: '{}' is truncated", path));
      e.data = at;
      at += e.size;
    }
    c.events.push_back(e);
  }
  if (c.events.empty() || c.events.back().kind != CaptureEvent::Kind::kEnd) {
    throw std::runtime_error(
        fmt::format("capture: '{}' has no end record (the capturing process did not exit cleanly)", path));
  }
  return c;
}

std::vector<uint64_t> Capture::end_cycles() const {
  std::vector<uint64_t> out;
  for (const CaptureEvent& e : events) {
    if (e.kind != CaptureEvent::Kind::kEnd) continue;
    if (out.size() <= e.card) out.resize(e.card + 1);
    out[e.card] = e.value;
  }
  return out;
}

// ---- Replaying ----------------------------------------------------------------------------------

class ReplayHost::Link final : public HostLink {
 public:
  Link(ReplayHost& host, uint32_t card) : host_(host), card_(card) {}
  bool dma_read(uint64_t iova, void* dst, uint64_t n) override {
    const uint8_t* kept = dma_kept(iova, n);
    if (kept) std::memcpy(dst, kept, n);
    return kept != nullptr;
  }
  // The capture's bytes stay mapped while the replay runs.
  bool keeps_bytes() const override { return true; }
  const uint8_t* dma_kept(uint64_t iova, uint64_t n) override {
    auto it = host_.reads_.find({card_, iova, n});
    if (it == host_.reads_.end() || it->second.empty()) {
      ++host_.result_.missing_reads;
      return nullptr;
    }
    const CaptureEvent& e = host_.capture_.events[it->second.take()];
    return e.ok ? host_.capture_.bytes() + e.data : nullptr;
  }
  bool dma_write(uint64_t iova, const void* src, uint64_t n) override {
    CaptureEvent e;
    e.kind = CaptureEvent::Kind::kDmaWrite;
    e.addr = iova;
    e.size = n;
    host_.answered(card_, e, fnv1a(src, n));
    return true;
  }
  bool peer_window(uint64_t iova, uint64_t n, uint32_t* card, uint64_t* addr) override {
    // A window stays mapped: once a range's captured crossings are used up (a wait across cards
    // that polls more often than it did when captured), the last one still names its card.
    auto it = host_.peers_.find({card_, iova, n});
    if (it == host_.peers_.end() || it->second.holds_none()) return false;
    const CaptureEvent& e = host_.capture_.events[it->second.empty() ? it->second.last() : it->second.take()];
    *card = static_cast<uint32_t>(e.value);
    *addr = e.peer_addr;
    return true;
  }
  void raise_irq(uint32_t vector) override {
    CaptureEvent e;
    e.kind = CaptureEvent::Kind::kIrq;
    e.value = vector;
    host_.answered(card_, e, 0);
  }

 private:
  ReplayHost& host_;
  uint32_t card_;
};

// A card's captured indices, each core's in the order it ran them.
class ReplayHost::Tape final : public IndexTape {
 public:
  explicit Tape(ReplayHost& host) : host_(host) {}
  void add(uint32_t core, size_t event) {
    if (core >= cores_.size()) cores_.resize(core + 1);
    cores_[core].push(event);
  }
  void record(uint32_t /*core*/, const uint8_t* /*indices*/, uint64_t /*n*/) override {}
  bool plays() const override { return true; }
  bool play(uint32_t core, uint8_t* indices, uint64_t n) override {
    if (core >= cores_.size() || cores_[core].empty()) {
      ++host_.result_.missing_indices;
      return false;
    }
    const CaptureEvent& e = host_.capture_.events[cores_[core].take()];
    if (e.size != n) {  // not the instruction that was captured: the replay has left the capture's path
      ++host_.result_.missing_indices;
      return false;
    }
    std::memcpy(indices, host_.capture_.bytes() + e.data, n);
    ++host_.result_.played_indices;
    return true;
  }

 private:
  ReplayHost& host_;
  std::vector<EventQueue> cores_;  // by core
};

ReplayHost::ReplayHost(const Capture& capture, uint32_t cards, std::function<void(const CaptureEvent&)> apply)
    : capture_(capture), apply_(std::move(apply)) {
  for (uint32_t c = 0; c < cards; ++c) {
    links_.push_back(std::make_unique<Link>(*this, c));
    tapes_.push_back(std::make_unique<Tape>(*this));
  }
  int64_t answers = -1;
  for (size_t i = 0; i < capture.events.size(); ++i) {
    const CaptureEvent& e = capture.events[i];
    if (e.from_host()) {
      if (e.card < cards) actions_.push_back({i, answers});
    } else if (e.to_host()) {
      ++answers;
      answer_times_.push_back(e.time_ps);
      answer_hashes_.push_back(e.kind == CaptureEvent::Kind::kDmaWrite ? e.hash : 0);
    } else if (e.kind == CaptureEvent::Kind::kDmaRead) {
      reads_[{e.card, e.addr, e.size}].push(i);
    } else if (e.kind == CaptureEvent::Kind::kPeer) {
      peers_[{e.card, e.addr, e.size}].push(i);
    } else if (e.kind == CaptureEvent::Kind::kIndices && e.card < cards) {
      tapes_[e.card]->add(static_cast<uint32_t>(e.value), i);
    }
  }
}

ReplayHost::~ReplayHost() = default;

HostLink* ReplayHost::link(uint32_t card) {
  return links_.at(card).get();
}

IndexTape* ReplayHost::tape(uint32_t card) {
  return tapes_.at(card).get();
}

void ReplayHost::answered(uint32_t /*card*/, const CaptureEvent& e, uint64_t hash) {
  const size_t k = replayed_times_.size();
  replayed_times_.push_back(now_ps());
  if (e.kind == CaptureEvent::Kind::kDmaWrite && (k >= answer_hashes_.size() || answer_hashes_[k] != hash)) {
    ++result_.diverged_writes;
  }
  // The next host write followed this answer: stop here, at the end of this delta cycle, as a
  // host-paced run stops at the interrupt that ends a wait, so that it can land in the same instant.
  if (next_ < actions_.size() && actions_[next_].answer == static_cast<int64_t>(k) &&
      sc_core::sc_get_status() == sc_core::SC_RUNNING) {
    sc_core::sc_pause();
  }
}

uint64_t ReplayHost::step(uint64_t now) {
  while (next_ < actions_.size()) {
    const Action& a = actions_[next_];
    const CaptureEvent& e = capture_.events[a.event];
    uint64_t at = e.time_ps;
    if (a.answer >= 0) {
      // The host acted (e.time_ps - answer time) after the card's answer; keep that gap.
      if (static_cast<size_t>(a.answer) >= replayed_times_.size()) return UINT64_MAX;  // not answered yet
      at = replayed_times_[a.answer] + (e.time_ps - answer_times_[a.answer]);
    }
    at = std::max(at, last_applied_);
    if (at > now) return at;
    apply_(e);
    last_applied_ = now;
    ++result_.host_actions;
    ++next_;
  }
  return UINT64_MAX;
}

}  // namespace spyre::sim
