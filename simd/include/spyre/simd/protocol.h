// The messages of the socket transport, between the driver and the simulator daemon (spyre-simd),
// after vfio-user: region reads and writes, DMA maps whose memory arrives as a file descriptor,
// interrupts as an eventfd, and the simulator's own services. No bulk data crosses the socket: DMA
// goes through the shared memory. docs/design-daemon.md has the plan this belongs to.
//
// Every message is a 16-byte header and a body of 32 bytes of arguments (four u64) and an optional
// text. Requests get one reply with the same id, unless flagged no-reply (posted MMIO writes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spyre::simd {

inline constexpr uint32_t kProtocolVersion = 5;  // 2: shared cards and status; 3: the config source in hello;
                                                 // 4: memory shared between clients (kIpcExport, kIpcOpen);
                                                 // 5: cards opened one by one (kOpen)
inline constexpr uint32_t kArgsBytes = 32;
inline constexpr uint32_t kMaxText = 65536;  // error messages, report paths, the status JSON, a config
inline constexpr uint32_t kMaxCards = 16;

enum class Command : uint16_t {
  kHello = 1,        // a: protocol version, b: pid, c: config digest; text: config source (channel.h)
                     //   -> a: version, b: cards, c: client id, d: the hash of the config simulated
  kCfgRead = 2,      // a: card, b: offset, c: size (1, 2, 4) -> a: value
  kCfgWrite = 3,     // a: card, b: offset, c: size, d: value
  kMmioRead = 4,     // a: card, b: offset (4-aligned) -> a: value
  kMmioWrite = 5,    // a: card, b: offset, c: value (may be posted: no reply)
  kDmaMap = 6,       // a: card, b: bytes, c: offset in the fd (4096-aligned); one fd -> a: IOVA
  kDmaUnmap = 7,     // a: card, b: IOVA
  kIrqSet = 8,       // a: card; one eventfd, written once per MSI-X
  kWaitBegin = 9,    // a: card, b: queue, c: seq -> a: token  (host pacing, architect guide)
  kWaitEnd = 10,     // a: token, b: ended by the card (0, 1)
  kPoll = 11,        // a: card
  kReports = 12,     // -> text: trace path, a newline, stats path
  kStatus = 13,      // -> text: the daemon's state as JSON (cards, clients, windows, queues): spyre-smi
  kDmaMapPeer = 14,  // a: card, b: peer card, c: peer device address, d: bytes -> a: IOVA (peer-to-peer)
  kIpcExport = 15,   // a: card, b: device address, c: bytes (in this client's window) -> a: handle
  kIpcOpen = 16,     // a: card, b: handle (another client's export on another card)
                     //   -> a: IOVA on card a, b: the exporter's card, c: its device address, d: bytes
  kOpen = 17,        // a: card -> a: the slot of the card this client now holds (before any other
                     //   command naming the card)
  kCount
};

inline constexpr uint16_t kFlagReply = 1u << 0;
inline constexpr uint16_t kFlagNoReply = 1u << 1;  // a request whose sender wants no reply
inline constexpr uint16_t kFlagError = 1u << 2;    // a reply whose request failed: `error`, `text`

struct Header {
  uint16_t command;
  uint16_t flags;
  uint32_t size;  // body bytes: kArgsBytes + text
  uint32_t id;
  uint32_t error;  // in an error reply: a driver::StatusCode
};
static_assert(sizeof(Header) == 16, "the header is 16 bytes");

struct Message {
  Command command = Command::kHello;
  uint16_t flags = 0;
  uint32_t id = 0;
  uint32_t error = 0;
  uint64_t args[4] = {};
  std::string text;

  bool is_reply() const { return (flags & kFlagReply) != 0; }
};

/// Stable lower-case name, for logs and errors.
const char* command_name(Command c);

/// The message's bytes on the socket.
std::vector<uint8_t> encode(const Message& m);

/// Bytes the message that starts with `header` takes on the socket (header and body), or 0 when
/// the header cannot start a valid message (an unknown command, a size out of bounds).
size_t message_bytes(const Header& header);

/// Checks one whole message of `n` bytes that arrived with `fds` file descriptors, and decodes it
/// into `out`. Returns "" when valid, else what is wrong, naming the field ("mmio_read.offset: ...").
std::string decode(const uint8_t* data, size_t n, size_t fds, Message* out);

}  // namespace spyre::simd
