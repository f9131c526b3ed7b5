// One end of the socket transport's connection: a Unix SOCK_SEQPACKET socket, one message per
// packet, file descriptors alongside (SCM_RIGHTS). Shared by the driver and spyre-simd.
#pragma once

#include <string>
#include <vector>

#include "spyre/simd/protocol.h"

namespace spyre::simd {

/// What a process asks the simulator to be, unread: the text of its $SPYRE_CONFIG file (empty: the
/// defaults) and its $SPYRE_FAULTS. Only the daemon parses it, so that the driver, which names the
/// daemon it wants by this, knows nothing of the simulator's config.
struct ConfigSource {
  std::string origin;  // the file's path, for messages; empty without one
  std::string text;    // the file's JSON text
  std::string faults;  // $SPYRE_FAULTS
};

/// This process's config source from $SPYRE_CONFIG and $SPYRE_FAULTS. "" or why it cannot be read.
std::string read_config_source(ConfigSource* out);

/// A source as the text of a hello: origin, NUL, text, NUL, faults. And back: false when malformed.
std::string encode_config_source(const ConfigSource& source);
bool decode_config_source(const std::string& text, ConfigSource* out);

/// A 64-bit digest of a config source (FNV-1a): the name of the daemon that simulates it.
uint64_t config_digest(const ConfigSource& source);

/// The socket of the daemon for the config source of digest `digest`: $SPYRE_SIMD_SOCKET, else
/// $XDG_RUNTIME_DIR/spyre-simd-<digest>.sock, else /tmp/spyre-simd-<uid>-<digest>.sock. Processes
/// that ask for different configs so reach different daemons.
std::string default_socket_path(uint64_t digest);

/// A connected socket to the daemon on `path`, or -1.
int connect_socket(const std::string& path);

/// The state of the daemon on `path` (empty: the one this process's config reaches) as JSON: its
/// cards, client slots and queues. Needs no client slot, so it answers while every slot is taken.
/// "" or why no daemon answers.
std::string query_status(std::string path, std::string* json);

/// Sends `m` with `fds` (their ownership stays with the caller). "" or the error.
std::string send_message(int sock, const Message& m, const std::vector<int>& fds = {});

/// Receives and checks one message; the descriptors that came with it are appended to `fds` (the
/// caller owns them, and they are closed here when the message is refused). "" or the error;
/// "closed" when the peer hung up.
std::string recv_message(int sock, Message* m, std::vector<int>* fds);

}  // namespace spyre::simd
