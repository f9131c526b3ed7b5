// The process-wide driver: one transport (chosen by $SPYRE_TRANSPORT, default "inproc") and the
// devices opened on it. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/driver/device.h"
#include "spyre/driver/transport.h"

namespace spyre::driver {

class Driver {
 public:
  /// The process's driver; opens the transport on first use.
  static Driver& instance();

  /// Status of opening the transport: kNotAvailable (with the reason) when it failed.
  const Status& transport_status() const { return transport_status_; }
  /// Cards present; 0 when the transport is unavailable. Never fails.
  uint32_t device_count() const;
  /// Opens card `index` on first use. kInvalidArgument naming the index when it does not exist.
  Status device(uint32_t index, Device** out);
  /// Closes card `index`: resets it and forgets its memory allocations. Every Queue and HostBuffer
  /// of the device must have been destroyed first. Closing a card that is not open is a no-op.
  void close(uint32_t index);
  /// The transport itself, for driver tests, tools and the simulator's services on it (reports,
  /// host pacing); users of devices never need it. nullptr when none could be opened.
  Transport* transport() { return transport_.get(); }
  /// "inproc", "socket" or "vfio"; empty when no transport could be opened.
  std::string transport_name() const { return transport_ ? transport_->name() : ""; }
  /// True in a child forked after this driver was created: its devices live in the parent's
  /// simulator thread, which the child does not have, so every device call fails cleanly.
  static bool forked_child();

 private:
  Driver();
  Status transport_status_;
  std::unique_ptr<Transport> transport_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace spyre::driver
