// Registers the Spyre device with c10: device guard (the backend of torch.accelerator), hooks,
// and the device memory allocator. Only c10 headers here, no ATen operators.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "aten_util.h"
#include "compute.h"
#include "device_allocator.h"
#include "profiler.h"
#include "runtime.h"
#include "spyre/driver/driver.h"

namespace spyre::backend {
namespace {

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(current_device()));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "spyre: expected a spyre device, got ", d);
    DeviceRuntime::check_index(d.index());
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { set_current_device(d.index()); }
  // Streams: a c10::Stream's id is the hardware queue's stream id in DeviceRuntime.
  static c10::Stream stream(c10::Device d, int64_t id) {
    if (!d.has_index()) d = c10::Device(d.type(), static_cast<c10::DeviceIndex>(current_device()));
    return c10::Stream(c10::Stream::UNSAFE, d, id);
  }
  static DeviceRuntime& runtime(c10::Device d) {
    return DeviceRuntime::get(d.has_index() ? d.index() : current_device());
  }
  c10::Stream getStream(c10::Device d) const override { return stream(d, runtime(d).current_stream()); }
  c10::Stream getDefaultStream(c10::Device d) const override { return stream(d, 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    return stream(d, runtime(d).pool_stream(high));
  }
  // As CUDA: a negative priority is a high one.
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return stream(d, runtime(d).pool_stream(priority < 0));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    DeviceRuntime& rt = runtime(s.device());
    const c10::Stream old = stream(s.device(), rt.current_stream());
    rt.set_current_stream(s.id());
    return old;
  }
  bool queryStream(const c10::Stream& s) const override { return runtime(s.device()).stream_query(s.id()); }
  bool isStreamCapturing(const c10::Stream& s) const override { return runtime(s.device()).capturing(s.id()); }
  void synchronizeStream(const c10::Stream& s) const override { runtime(s.device()).stream_synchronize(s.id()); }

  // Events: a StreamEvent (runtime.h) behind the void*.
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == s.device_index(), "spyre: event of device ", device_index,
                " recorded on a stream of device ", s.device_index());
    auto* ev = static_cast<StreamEvent*>(*event);
    if (!ev) ev = new StreamEvent();
    try {
      runtime(s.device()).record_event(*ev, s.id(), flag == c10::EventFlag::BACKEND_DEFAULT);
    } catch (...) {
      if (!*event) delete ev;
      throw;
    }
    *event = ev;
  }
  void block(void* event, const c10::Stream& s) const override {
    if (!event) return;  // never recorded: nothing to wait for
    runtime(s.device()).wait_event(*static_cast<StreamEvent*>(event), s.id());
  }
  bool queryEvent(void* event) const override {
    if (!event) return true;
    const auto& ev = *static_cast<StreamEvent*>(event);
    return DeviceRuntime::get(ev.device).event_query(ev);
  }
  void synchronizeEvent(void* event) const override {
    if (!event) return;
    const auto& ev = *static_cast<StreamEvent*>(event);
    DeviceRuntime::get(ev.device).event_synchronize(ev);
  }
  double elapsedTime(void* a, void* b, const c10::DeviceIndex device_index) const override {
    TORCH_CHECK_VALUE(a && b, "spyre: elapsed_time needs both events recorded");
    return DeviceRuntime::get(device_index).elapsed_ms(*static_cast<StreamEvent*>(a), *static_cast<StreamEvent*>(b));
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    auto* ev = static_cast<StreamEvent*>(event);
    if (!ev) return;
    if (ev->device >= 0 && DeviceRuntime::opened(ev->device) && !driver::Driver::forked_child()) {
      try {
        DeviceRuntime::get(ev->device).release_event(*ev);
      } catch (...) {
        // deliberately empty: a destructor cannot throw, and a card that is gone has no slot to free
      }
    }
    delete ev;
  }
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& s) const override {
    device_allocator().recordStream(data, s);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(DeviceRuntime::count());
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override { DeviceRuntime::get(index).synchronize(); }
  // torch.accelerator.get_device_capability: the dtypes the card computes in (its copies convert
  // among them on the card; tensors of other dtypes can be stored, converted on the host).
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
#define SPYRE_NATIVE_DTYPE(_, name) \
  cap.capability_data.supported_scalar_types.has_##name = device_dtype(c10::ScalarType::name).has_value();
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(SPYRE_NATIVE_DTYPE)
#undef SPYRE_NATIVE_DTYPE
    return cap;
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// The tensor allocator is in device_allocator.cpp.

// pin_memory(): host memory the card's DMA reaches directly (PinnedHost in runtime.h), so copies
// from and to it skip the staging buffer, and a non_blocking copy from it overlaps with compute.
// Also the device's host allocator (torch.accelerator.empty_host_cache and the host memory
// stats): it caches nothing, since a buffer is mapped for its life and unmapped when freed (after
// the card's queued work, which may still read it), so record_event has nothing to track.
class PinnedAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &deleter, c10::Device(c10::kCPU));
    void* ctx = nullptr;
    void* data = PinnedHost::pin(nbytes, &ctx);
    {
      std::lock_guard lock(mu_);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(static_cast<int64_t>(nbytes));
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(static_cast<int64_t>(nbytes));
    }
    return c10::DataPtr(data, ctx, &deleter, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard lock(mu_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard lock(mu_);
    for (auto* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.active_requests, &stats_.active_bytes}) {
      s->reset_accumulated();
    }
  }
  void reset_peak_stats() override {
    std::lock_guard lock(mu_);
    for (auto* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.active_requests, &stats_.active_bytes}) {
      s->reset_peak();
    }
  }

  static PinnedAllocator& instance();

 private:
  static void deleter(void* ctx) {
    if (!ctx) return;  // an empty allocation
    {
      std::lock_guard lock(instance().mu_);
      instance().stats_.active_requests.decrease(1);
      instance().stats_.active_bytes.decrease(static_cast<int64_t>(PinnedHost::bytes(ctx)));
    }
    PinnedHost::unpin(ctx);
  }

  std::mutex mu_;
  at::HostStats stats_;
};
PinnedAllocator g_pinned_allocator;
PinnedAllocator& PinnedAllocator::instance() {
  return g_pinned_allocator;
}
REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned_allocator);

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return DeviceRuntime::count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override { return DeviceRuntime::opened(index); }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(DeviceRuntime::count()); }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    GuardImpl().setDevice(c10::Device(c10::DeviceType::PrivateUse1, index));
  }
  c10::DeviceIndex getCurrentDevice() const override { return static_cast<c10::DeviceIndex>(current_device()); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const int old = current_device();
    setCurrentDevice(index);
    return static_cast<c10::DeviceIndex>(old);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }
  at::Device getDeviceFromPtr(void* data) const override {
    const int dev = device_of_pointer(data);
    TORCH_CHECK(dev >= 0, "spyre: pointer ", data, " was not allocated by the spyre allocator");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(dev));
  }
  bool isPinnedPtr(const void* p) const override { return PinnedHost::contains(p); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? static_cast<c10::DeviceIndex>(current_device()) : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? static_cast<c10::DeviceIndex>(current_device()) : index).clone();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override {
    resize_storage_bytes(storage, bytes);
  }
};

// The profiler's per-op device hooks. torch calls them around every op when spyre is profiled.
// While the kineto plugin (profiler.cpp) records the card's own kernels and copies, they only give
// the host time: a second, coarser device time per op would be counted on top of the kernels'.
// Without kineto (use_kineto=False), an event is a sample of the card's clock taken by the host,
// so an op's device time is how far the simulated card advanced while the host ran the op.
// Without these hooks the profiler read garbage: every CPU time came out near -7e16 us.
struct ProfilerHooks final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const int index = current_device();
    if (device) *device = static_cast<c10::DeviceIndex>(index);
    if (cpu_ns) *cpu_ns = c10::getTime();
    if (!event) return;
    if (profiling::active()) {
      *event = nullptr;
      return;
    }
    DeviceRuntime& rt = DeviceRuntime::get(index);
    *event =
        std::make_shared<double>(static_cast<double>(rt.device().cycles()) * 1e3 / rt.device().info().card.clock_mhz);
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    if (!a || !b || !*a || !*b) return 0;  // kineto's device events carry the time
    const double from = *static_cast<const double*>(a->get()), to = *static_cast<const double*>(b->get());
    return static_cast<float>((to - from) / 1e3);  // microseconds, as the profiler expects
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    const int saved = current_device();
    for (int i = 0; i < DeviceRuntime::count(); ++i) {
      set_current_device(i);
      op(i);
    }
    set_current_device(saved);
  }
  void synchronize() const override {
    for (int i = 0; i < DeviceRuntime::count(); ++i) {
      if (DeviceRuntime::opened(i)) DeviceRuntime::get(i).synchronize();
    }
  }
};

const bool g_profiler_registered = [] {
  static ProfilerHooks hooks;
  torch::profiler::impl::registerPrivateUse1Methods(&hooks);
  return true;
}();

// Backend metadata: the string -> bool flags that torch._C._set_tensor_metadata gives a tensor and
// _get_tensor_metadata reads back. They follow detach() (TensorImpl copies its backend meta with
// its other metadata) and torch.save and torch.load (the pickler's backend-meta slot).
struct SpyreMeta final : c10::BackendMeta {
  std::unordered_map<std::string, bool> flags;
  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& /*self*/) const override {
    auto copy = c10::make_intrusive<SpyreMeta>();
    copy->flags = flags;
    return copy;
  }
};

void get_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& out) {
  if (const auto* m = dynamic_cast<const SpyreMeta*>(t.unsafeGetTensorImpl()->get_backend_meta())) {
    out.insert(m->flags.begin(), m->flags.end());
  }
}

void set_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& in) {
  auto m = c10::make_intrusive<SpyreMeta>();
  m->flags = in;
  t.unsafeGetTensorImpl()->set_backend_meta(m);
}

const bool g_meta_registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &get_meta, &set_meta);
  return true;
}();

const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}();

}  // namespace

void resize_storage_bytes(const c10::Storage& storage, size_t bytes) {
  TORCH_CHECK(storage.resizable(), "spyre: trying to resize storage that is not resizable");
  const size_t old = storage.nbytes();
  if (bytes == old) return;
  const int dev = storage.device().index();
  c10::DataPtr fresh;
  {
    const c10::DeviceGuard guard(storage.device());
    fresh = device_allocator().allocate(bytes);
  }
  DeviceRuntime& rt = DeviceRuntime::get(dev);
  if (old > 0 && bytes > 0) {
    rt.d2d(device_address(fresh.get()), device_address(storage.data()), std::min(old, bytes));
    // The copy reads the old block on the current stream, which may not be the one it was
    // allocated on: keep it from reuse until the copy has run.
    device_allocator().recordStream(storage.data_ptr(),
                                    c10::Stream(c10::Stream::UNSAFE, storage.device(), rt.current_stream()));
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(bytes);
}

}  // namespace spyre::backend
