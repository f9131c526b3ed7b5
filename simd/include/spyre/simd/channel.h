// One end of the socket transport's connection: a Unix SOCK_SEQPACKET socket, one message per
// packet, file descriptors alongside (SCM_RIGHTS). Shared by the driver and spyre-simd.
#pragma once

#include <string>
#include <vector>

#include "spyre/simd/protocol.h"

namespace spyre::simd {

/// The socket of the daemon that simulates the config of hash `config_hash`: $SPYRE_SIMD_SOCKET,
/// else $XDG_RUNTIME_DIR/spyre-simd-<hash>.sock, else /tmp/spyre-simd-<uid>-<hash>.sock. Processes
/// that ask for different configs so reach different daemons.
std::string default_socket_path(uint64_t config_hash);

/// Sends `m` with `fds` (their ownership stays with the caller). "" or the error.
std::string send_message(int sock, const Message& m, const std::vector<int>& fds = {});

/// Receives and checks one message; the descriptors that came with it are appended to `fds` (the
/// caller owns them, and they are closed here when the message is refused). "" or the error;
/// "closed" when the peer hung up.
std::string recv_message(int sock, Message* m, std::vector<int>* fds);

}  // namespace spyre::simd
