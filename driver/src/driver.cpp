#include "spyre/driver/driver.h"

#include <pthread.h>

#include <atomic>
#include <cstdlib>

#include <fmt/format.h>

namespace spyre::driver {

namespace {
std::atomic<bool> g_forked_child{false};
}

bool Driver::forked_child() {
  return g_forked_child.load();
}

Driver& Driver::instance() {
  // Never destroyed: device memory may be freed by other static destructors at exit.
  static Driver* d = new Driver();
  return *d;
}

Driver::Driver() {
  pthread_atfork(nullptr, nullptr, [] { g_forked_child.store(true); });
  const char* kind = std::getenv("SPYRE_TRANSPORT");
  transport_status_ = open_transport(kind ? kind : "inproc", &transport_);
  if (transport_) devices_.resize(transport_->device_count());
}

uint32_t Driver::device_count() const {
  return transport_ ? transport_->device_count() : 0;
}

Status Driver::device(uint32_t index, Device** out) {
  if (forked_child()) {
    return {StatusCode::kNotAvailable,
            "driver: this process was forked after the driver started; a forked child cannot use its "
            "devices (start subprocesses with the 'spawn' method)"};
  }
  if (!transport_status_.ok()) return transport_status_;
  std::lock_guard lock(mu_);
  if (index >= devices_.size()) {
    return {StatusCode::kInvalidArgument,
            fmt::format("driver: device index {} is out of range ({} device(s) present)", index, devices_.size())};
  }
  if (!devices_[index]) {
    if (Status s = Device::open(*transport_, index, &devices_[index]); !s.ok()) return s;
  }
  *out = devices_[index].get();
  return {};
}

void Driver::close(uint32_t index) {
  std::lock_guard lock(mu_);
  if (index < devices_.size()) devices_[index].reset();
}

}  // namespace spyre::driver
