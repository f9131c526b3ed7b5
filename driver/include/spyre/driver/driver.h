// The process-wide driver: one transport (chosen by $SPYRE_TRANSPORT, default "inproc") and the
// devices opened on it. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
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
  Transport* transport() { return transport_.get(); }

 private:
  Driver();
  Status transport_status_;
  std::unique_ptr<Transport> transport_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace spyre::driver
