// Status codes returned across the driver API. The driver never throws; callers (the PyTorch
// device) turn a failed Status into their own error type in exactly one place.
#pragma once

#include <string>
#include <utility>

namespace spyre::driver {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something the driver or device cannot use
  kOutOfMemory,      // device memory (or host memory for DMA buffers) is exhausted
  kDeviceError,      // the device completed a command with an error
  kNotAvailable,     // the transport or device does not exist on this host
  kTimeout,          // a host wait ran past the wait policy's timeout; the work goes on
  kInterrupted,      // the wait policy's interrupt check ended a host wait (Ctrl-C)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  /// "component: what went wrong (the value)"; empty when ok.
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace spyre::driver
