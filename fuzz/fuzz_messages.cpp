// libFuzzer target: the socket transport's message parser, simd::decode, which spyre-simd runs on
// every packet a client sends (and the driver on every reply).
//
// Input: byte 0 is the number of file descriptors said to arrive with the message (0..3); the rest
// is the packet.
//
// Invariants:
//   - an accepted message re-encodes to exactly the packet (nothing is read past it, nothing in it
//     is ignored), and message_bytes() of its header is the packet's length;
//   - an accepted request carries the descriptors its command takes (one for dma_map and irq_set,
//     none for the others), no text unless it is a hello (which carries its config's source), and
//     only mmio_write is posted without a reply;
//   - a refusal names what is wrong.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "spyre/simd/protocol.h"

using namespace spyre::simd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t fds = data[0] % 4;
  const uint8_t* packet = data + 1;
  const size_t n = size - 1;
  Message m;
  const std::string why = decode(packet, n, fds, &m);
  if (!why.empty()) {
    if (why.find(':') == std::string::npos) std::abort();  // "<field>: <what>"
    return 0;
  }
  const std::vector<uint8_t> again = encode(m);
  if (again.size() != n || std::memcmp(again.data(), packet, n) != 0) std::abort();
  Header h;
  std::memcpy(&h, packet, sizeof h);
  if (message_bytes(h) != n) std::abort();
  if (!m.is_reply()) {
    const bool takes_fd = m.command == Command::kDmaMap || m.command == Command::kIrqSet;
    if (fds != (takes_fd ? 1u : 0u) || (!m.text.empty() && m.command != Command::kHello)) std::abort();
    if ((m.flags & kFlagNoReply) && m.command != Command::kMmioWrite) std::abort();
  } else if (fds != 0) {
    std::abort();
  }
  return 0;
}
