// The socket transport's message codec: every command round-trips, and each malformed header
// field, argument, flag and file-descriptor count is refused with the field named.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spyre/simd/channel.h"
#include "spyre/simd/protocol.h"

using namespace spyre::simd;

namespace {

Message request(Command c, uint64_t a = 0, uint64_t b = 0, uint64_t cc = 0, uint64_t d = 0) {
  Message m;
  m.command = c;
  m.id = 7;
  m.args[0] = a;
  m.args[1] = b;
  m.args[2] = cc;
  m.args[3] = d;
  return m;
}

// A valid request of each command, and the file descriptors it carries.
struct Valid {
  Message m;
  size_t fds;
};
std::vector<Valid> valid_requests() {
  return {
      {request(Command::kHello, kProtocolVersion, 1234, 0x8def3ecffc3564c8), 0},
      {request(Command::kCfgRead, 0, 4, 2), 0},
      {request(Command::kCfgWrite, 1, 4, 2, 0x6), 0},
      {request(Command::kMmioRead, 0, 0x1028), 0},
      {request(Command::kMmioWrite, 15, 0x1030, 0xffffffff), 0},
      {request(Command::kDmaMap, 0, 1 << 20, 4096), 1},
      {request(Command::kDmaUnmap, 0, 0x1000'0000'0000), 0},
      {request(Command::kIrqSet, 2), 1},
      {request(Command::kWaitBegin, 0, 15, 99), 0},
      {request(Command::kWaitEnd, 5, 1), 0},
      {request(Command::kPoll, 0), 0},
      {request(Command::kReports), 0},
      {request(Command::kStatus), 0},
      {request(Command::kDmaMapPeer, 0, 1, 0x10000, 4096), 0},
      {request(Command::kIpcExport, 1, 0x10000, 4096), 0},
      {request(Command::kIpcOpen, 0, 0x9e3779b97f4a7c15), 0},
      {request(Command::kOpen, 7), 0},
  };
}

std::string check(const Message& m, size_t fds, Message* out = nullptr) {
  const std::vector<uint8_t> bytes = encode(m);
  Message got;
  return decode(bytes.data(), bytes.size(), fds, out ? out : &got);
}

}  // namespace

TEST_CASE("every command round-trips, request and reply") {
  const auto requests = valid_requests();
  REQUIRE(requests.size() == static_cast<size_t>(Command::kCount) - 1);
  for (const Valid& v : requests) {
    CAPTURE(command_name(v.m.command));
    Message got;
    REQUIRE(check(v.m, v.fds, &got) == "");
    CHECK(got.command == v.m.command);
    CHECK(got.id == 7);
    CHECK(std::memcmp(got.args, v.m.args, sizeof got.args) == 0);
    const std::vector<uint8_t> bytes = encode(v.m);
    Header h;
    std::memcpy(&h, bytes.data(), sizeof h);
    CHECK(message_bytes(h) == bytes.size());

    Message reply = v.m;
    reply.flags = kFlagReply;
    reply.args[0] = 0x1234;
    CHECK(check(reply, 0) == "");
    Message failed = request(v.m.command);
    failed.flags = kFlagReply | kFlagError;
    failed.error = 3;
    failed.text = "spyre:0: out of device memory";
    REQUIRE(check(failed, 0, &got) == "");
    CHECK(got.text == failed.text);
  }
  Message reports = request(Command::kReports);
  reports.flags = kFlagReply;
  reports.text = "/tmp/trace.json\n/tmp/stats.json";
  CHECK(check(reports, 0) == "");
  Message status = request(Command::kStatus);
  status.flags = kFlagReply;
  status.text = std::string(kMaxText, 'x');  // the status JSON of a big card set fits
  CHECK(check(status, 0) == "");
  Message pong = request(Command::kPoll, 0);
  pong.flags = kFlagReply;
  pong.text = "text";
  CHECK(check(pong, 0) == "poll.reply: carries no text");
  Message posted = request(Command::kMmioWrite, 0, 0x30, 5);
  posted.flags = kFlagNoReply;
  CHECK(check(posted, 0) == "");
}

TEST_CASE("malformed headers are refused, naming the field") {
  std::vector<uint8_t> bytes = encode(request(Command::kPoll, 0));
  Message out;
  CHECK(decode(bytes.data(), 10, 0, &out) == "header: shorter than 16 bytes");
  CHECK(decode(bytes.data(), bytes.size() - 1, 0, &out).rfind("header.size", 0) == 0);
  const auto with = [&](auto edit) {
    std::vector<uint8_t> b = bytes;
    Header h;
    std::memcpy(&h, b.data(), sizeof h);
    edit(h);
    std::memcpy(b.data(), &h, sizeof h);
    return decode(b.data(), b.size(), 0, &out);
  };
  CHECK(with([](Header& h) { h.command = 0; }).rfind("header.command", 0) == 0);
  CHECK(with([](Header& h) { h.command = 99; }).rfind("header.command", 0) == 0);
  CHECK(with([](Header& h) { h.size = 8; }).rfind("header.size", 0) == 0);
  CHECK(with([](Header& h) { h.size = 1u << 30; }).rfind("header.size", 0) == 0);
  CHECK(with([](Header& h) { h.flags = 0x80; }) == "header.flags: unknown bits");
  CHECK(with([](Header& h) { h.flags = kFlagReply | kFlagNoReply; }).rfind("header.flags", 0) == 0);
  CHECK(with([](Header& h) { h.flags = kFlagError; }).rfind("header.flags", 0) == 0);
  CHECK(with([](Header& h) {
          h.flags = kFlagReply;
          h.error = 2;
        }).rfind("header.error", 0) == 0);
  CHECK(with([](Header& h) { h.flags = kFlagNoReply; }) ==
        "header.flags: only mmio_write may be posted without a reply");
  Header bad{99, 0, 32, 0, 0};
  CHECK(message_bytes(bad) == 0);
  Header huge{4, 0, 1u << 31, 0, 0};
  CHECK(message_bytes(huge) == 0);
}

TEST_CASE("each malformed request argument is refused, naming it") {
  const struct {
    Message m;
    size_t fds;
    const char* expect;
  } cases[] = {
      {request(Command::kHello, 0, 1), 0, "hello.version"},
      {request(Command::kHello, 1, 0), 0, "hello.pid"},
      {request(Command::kHello, 1, 1, 0, 5), 0, "hello.d: must be 0"},
      {request(Command::kCfgRead, 16, 0, 4), 0, "cfg_read.card"},
      {request(Command::kCfgRead, 0, 0, 3), 0, "cfg_read.size"},
      {request(Command::kCfgRead, 0, 2, 4), 0, "cfg_read.offset"},
      {request(Command::kCfgRead, 0, 4094, 4), 0, "cfg_read.offset"},
      {request(Command::kCfgWrite, 0, 4, 1, 0x100), 0, "cfg_write.value"},
      {request(Command::kMmioRead, 0, 2), 0, "mmio_read.offset"},
      {request(Command::kMmioRead, 0, 0, 1), 0, "mmio_read.c: must be 0"},
      {request(Command::kMmioWrite, 0, 0, uint64_t{1} << 32), 0, "mmio_write.value"},
      {request(Command::kDmaMap, 0, 100), 1, "dma_map.bytes"},
      {request(Command::kDmaMap, 0, 4096, 10), 1, "dma_map.file_offset"},
      {request(Command::kDmaMap, 0, 4096, UINT64_MAX - 4095), 1, "dma_map.file_offset"},
      {request(Command::kDmaMap, 0, 4096), 0, "dma_map.fds"},
      {request(Command::kDmaMap, 0, 4096), 2, "dma_map.fds"},
      {request(Command::kDmaUnmap, 0, 0), 0, "dma_unmap.iova"},
      {request(Command::kIrqSet, 0), 0, "irq_set.fds"},
      {request(Command::kIrqSet, 0, 1), 1, "irq_set.b: must be 0"},
      {request(Command::kWaitBegin, 0, 16, 1), 0, "wait_begin.queue"},
      {request(Command::kWaitBegin, 0, 0, 0), 0, "wait_begin.seq"},
      {request(Command::kWaitEnd, 0, 1), 0, "wait_end.token"},
      {request(Command::kWaitEnd, 1, 2), 0, "wait_end.ended_by_card"},
      {request(Command::kPoll, 99), 0, "poll.card"},
      {request(Command::kReports, 1), 0, "reports.a: must be 0"},
      {request(Command::kStatus, 0, 0, 0, 7), 0, "status.d: must be 0"},
      {request(Command::kDmaMapPeer, 0, 16, 0, 8), 0, "dma_map_peer.peer"},
      {request(Command::kDmaMapPeer, 0, 1, 0, 0), 0, "dma_map_peer.bytes"},
      {request(Command::kDmaMapPeer, 0, 1, ~0ull, 8), 0, "dma_map_peer.address"},
      {request(Command::kIpcExport, 16, 0, 8), 0, "ipc_export.card"},
      {request(Command::kIpcExport, 0, 0, 0), 0, "ipc_export.bytes"},
      {request(Command::kIpcExport, 0, ~0ull, 8), 0, "ipc_export.address"},
      {request(Command::kIpcExport, 0, 0, 8, 1), 0, "ipc_export.d: must be 0"},
      {request(Command::kIpcOpen, 0, 0), 0, "ipc_open.handle"},
      {request(Command::kIpcOpen, 0, 1, 2), 0, "ipc_open.c: must be 0"},
      {request(Command::kPoll, 0), 1, "poll.fds"},
      {request(Command::kOpen, 16), 0, "open.card"},
      {request(Command::kOpen, 0, 1), 0, "open.b: must be 0"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.expect);
    const std::string why = check(k.m, k.fds);
    CHECK(why.rfind(k.expect, 0) == 0);
  }
  Message text = request(Command::kPoll, 0);
  text.text = "hello";
  CHECK(check(text, 0).rfind("poll.text", 0) == 0);
  Message reply_text = request(Command::kPoll, 0);
  reply_text.flags = kFlagReply;
  reply_text.text = "x";
  CHECK(check(reply_text, 0).rfind("poll.reply", 0) == 0);
  CHECK(check(reply_text, 1).rfind("poll.reply", 0) == 0);
}

TEST_CASE("a config source goes through a hello's text and back, and names its daemon") {
  const ConfigSource a{"/tmp/a.json", R"({"chip": {"cores": 8}})", R"({"dma_fault_rate": 0.5})"};
  Message hello = request(Command::kHello, kProtocolVersion, 1234, config_digest(a));
  hello.text = encode_config_source(a);
  CHECK(check(hello, 0).empty());
  ConfigSource back;
  REQUIRE(decode_config_source(hello.text, &back));
  CHECK(back.origin == a.origin);
  CHECK(back.text == a.text);
  CHECK(back.faults == a.faults);
  CHECK_FALSE(decode_config_source("no separators", &back));
  CHECK_FALSE(decode_config_source(std::string("a\0b\0c\0d", 7), &back));

  // The file's name is not the config: the same text elsewhere reaches the same daemon; any other
  // text, or the same bytes split differently between file and faults, another one.
  ConfigSource moved = a;
  moved.origin = "/home/x/b.json";
  CHECK(config_digest(moved) == config_digest(a));
  ConfigSource other = a;
  other.text = R"({"chip": {"cores": 16}})";
  CHECK(config_digest(other) != config_digest(a));
  const ConfigSource split1{"", "ab", "c"}, split2{"", "a", "bc"};
  CHECK(config_digest(split1) != config_digest(split2));
  if (std::getenv("SPYRE_SIMD_SOCKET") == nullptr) {
    CHECK(default_socket_path(config_digest(a)) != default_socket_path(config_digest(other)));
  }
}
