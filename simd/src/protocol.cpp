#include "spyre/simd/protocol.h"

#include <cstring>
#include <string>

namespace spyre::simd {

namespace {

constexpr uint64_t kMaxMapBytes = uint64_t{1} << 40;  // a TiB: far above any host buffer
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxQueues = 16;
constexpr uint64_t kMaxPid = uint64_t{1} << 22;  // Linux's pid_max ceiling

// Field names as the errors give them: "<command>.<a|b|c|d meaning>".
struct Spec {
  const char* name;
  const char* args[4];  // what a, b, c, d mean in a request; nullptr: must be zero
  uint32_t fds;         // file descriptors a request carries
};

constexpr Spec kSpecs[] = {
    {"?", {}, 0},
    {"hello", {"version", "pid", "config_digest", nullptr}, 0},
    {"cfg_read", {"card", "offset", "size", nullptr}, 0},
    {"cfg_write", {"card", "offset", "size", "value"}, 0},
    {"mmio_read", {"card", "offset", nullptr, nullptr}, 0},
    {"mmio_write", {"card", "offset", "value", nullptr}, 0},
    {"dma_map", {"card", "bytes", "file_offset", nullptr}, 1},
    {"dma_unmap", {"card", "iova", nullptr, nullptr}, 0},
    {"irq_set", {"card", nullptr, nullptr, nullptr}, 1},
    {"wait_begin", {"card", "queue", "seq", nullptr}, 0},
    {"wait_end", {"token", "ended_by_card", nullptr, nullptr}, 0},
    {"poll", {"card", nullptr, nullptr, nullptr}, 0},
    {"reports", {nullptr, nullptr, nullptr, nullptr}, 0},
    {"status", {nullptr, nullptr, nullptr, nullptr}, 0},
    {"dma_map_peer", {"card", "peer", "address", "bytes"}, 0},
    {"ipc_export", {"card", "address", "bytes", nullptr}, 0},
    {"ipc_open", {"card", "handle", nullptr, nullptr}, 0},
    {"open", {"card", nullptr, nullptr, nullptr}, 0},
};
static_assert(sizeof(kSpecs) / sizeof(kSpecs[0]) == static_cast<size_t>(Command::kCount), "a spec per command");

std::string field(Command c, const char* f) {
  return std::string(kSpecs[static_cast<size_t>(c)].name) + "." + f;
}

// The request's arguments, beyond their presence: "" or what is wrong.
std::string check_request_args(const Message& m) {
  const uint64_t a = m.args[0], b = m.args[1], c = m.args[2], d = m.args[3];
  const auto bad = [&](const char* f, const std::string& what) { return field(m.command, f) + ": " + what; };
  switch (m.command) {
    case Command::kHello:
      if (a == 0) return bad("version", "must be at least 1");
      if (b == 0 || b >= kMaxPid) return bad("pid", "not a process id");
      return "";
    case Command::kCfgRead:
    case Command::kCfgWrite:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (c != 1 && c != 2 && c != 4) return bad("size", "must be 1, 2 or 4");
      if (b >= 4096 || b % c != 0 || b + c > 4096) return bad("offset", "outside config space or misaligned");
      if (m.command == Command::kCfgWrite && (c == 4 ? d > 0xffffffffull : d >= (uint64_t{1} << (8 * c)))) {
        return bad("value", "wider than size");
      }
      return "";
    case Command::kMmioRead:
    case Command::kMmioWrite:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (b % 4 != 0 || b > 0xffffffffull) return bad("offset", "must be a 4-aligned 32-bit BAR0 offset");
      if (m.command == Command::kMmioWrite && c > 0xffffffffull) return bad("value", "wider than 32 bits");
      return "";
    case Command::kDmaMap:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (b == 0 || b > kMaxMapBytes || b % kPage != 0) return bad("bytes", "must be whole pages, at most 1 TiB");
      if (c % kPage != 0 || c > UINT64_MAX - b) return bad("file_offset", "must be page-aligned");
      return "";
    case Command::kDmaUnmap:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (b == 0 || b % kPage != 0) return bad("iova", "not a mapping's address");
      return "";
    case Command::kDmaMapPeer:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (b >= kMaxCards) return bad("peer", "out of range");
      if (d == 0 || d > kMaxMapBytes) return bad("bytes", "must be 1 .. 1 TiB");
      if (c > UINT64_MAX - d) return bad("address", "the range wraps");
      return "";
    case Command::kIpcExport:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (c == 0 || c > kMaxMapBytes) return bad("bytes", "must be 1 .. 1 TiB");
      if (b > UINT64_MAX - c) return bad("address", "the range wraps");
      return "";
    case Command::kIpcOpen:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (b == 0) return bad("handle", "must not be 0");
      return "";
    case Command::kIrqSet:
    case Command::kPoll:
    case Command::kOpen:
      if (a >= kMaxCards) return bad("card", "out of range");
      return "";
    case Command::kWaitBegin:
      if (a >= kMaxCards) return bad("card", "out of range");
      if (b >= kMaxQueues) return bad("queue", "out of range");
      if (c == 0) return bad("seq", "must be at least 1");
      return "";
    case Command::kWaitEnd:
      if (a == 0) return bad("token", "must not be 0");
      if (b > 1) return bad("ended_by_card", "must be 0 or 1");
      return "";
    case Command::kReports:
    case Command::kStatus:
    case Command::kCount:
      return "";
  }
  return "";
}

}  // namespace

const char* command_name(Command c) {
  const auto i = static_cast<size_t>(c);
  return i > 0 && i < static_cast<size_t>(Command::kCount) ? kSpecs[i].name : "unknown";
}

std::vector<uint8_t> encode(const Message& m) {
  const Header h{static_cast<uint16_t>(m.command), m.flags, static_cast<uint32_t>(kArgsBytes + m.text.size()), m.id,
                 m.error};
  std::vector<uint8_t> out(sizeof h + h.size);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, m.args, kArgsBytes);
  std::memcpy(out.data() + sizeof h + kArgsBytes, m.text.data(), m.text.size());
  return out;
}

size_t message_bytes(const Header& h) {
  if (h.command == 0 || h.command >= static_cast<uint16_t>(Command::kCount)) return 0;
  if (h.size < kArgsBytes || h.size > kArgsBytes + kMaxText) return 0;
  return sizeof(Header) + h.size;
}

std::string decode(const uint8_t* data, size_t n, size_t fds, Message* out) {
  if (n < sizeof(Header)) return "header: shorter than 16 bytes";
  Header h;
  std::memcpy(&h, data, sizeof h);
  if (h.command == 0 || h.command >= static_cast<uint16_t>(Command::kCount)) {
    return "header.command: unknown command " + std::to_string(h.command);
  }
  if (h.size < kArgsBytes || h.size > kArgsBytes + kMaxText) return "header.size: out of bounds";
  if (n != sizeof h + h.size) return "header.size: does not match the message's length";
  const uint16_t known = kFlagReply | kFlagNoReply | kFlagError;
  if (h.flags & ~known) return "header.flags: unknown bits";
  const bool reply = h.flags & kFlagReply;
  if (reply && (h.flags & kFlagNoReply)) return "header.flags: a reply cannot ask for no reply";
  if (!reply && (h.flags & kFlagError)) return "header.flags: only a reply can carry an error";
  if (((h.flags & kFlagError) != 0) != (h.error != 0)) return "header.error: set exactly when the error flag is";

  Message m;
  m.command = static_cast<Command>(h.command);
  m.flags = h.flags;
  m.id = h.id;
  m.error = h.error;
  std::memcpy(m.args, data + sizeof h, kArgsBytes);
  m.text.assign(reinterpret_cast<const char*>(data + sizeof h + kArgsBytes), h.size - kArgsBytes);
  const Spec& spec = kSpecs[h.command];

  if (reply) {
    if (fds != 0) return field(m.command, "reply") + ": carries no file descriptor";
    if (!m.text.empty() && !(h.flags & kFlagError) && m.command != Command::kReports && m.command != Command::kStatus) {
      return field(m.command, "reply") + ": carries no text";
    }
  } else {
    if (fds != spec.fds) {
      return field(m.command, "fds") + ": takes " + std::to_string(spec.fds) + " file descriptor(s), got " +
             std::to_string(fds);
    }
    if (!m.text.empty() && m.command != Command::kHello)
      return field(m.command, "text") + ": a request carries no text";
    if ((h.flags & kFlagNoReply) && m.command != Command::kMmioWrite) {
      return "header.flags: only mmio_write may be posted without a reply";
    }
    static const char* const kUnused[4] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; ++i) {
      if (spec.args[i] == nullptr && m.args[i] != 0) return field(m.command, kUnused[i]) + ": must be 0";
    }
    if (std::string why = check_request_args(m); !why.empty()) return why;
  }
  *out = std::move(m);
  return "";
}

}  // namespace spyre::simd
