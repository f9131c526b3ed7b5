// A kineto plugin (libkineto::IActivityProfiler) that gives torch.profiler the card's own view:
// with ProfilerActivity.PrivateUse1, each kernel launch and copy the runtime submitted becomes a
// kernel or memcpy activity on its device and stream, timed by the start and end cycles in its
// completion record, and linked to the ATen op that queued it (kineto's correlation ids).
//
// Device time is placed on the host timeline from the session's start: an activity starts at
// (host time at session start) + (its start cycle - the card's cycle then) / clock. The simulated
// card is not in step with the host's clock, so device tracks line up with each other and with
// their durations, not with the CPU ops around them.
// kineto's activity metadata formats with torch's bundled {fmt}, whose library torch does not
// export: compile the little of it used here into this file.
#define FMT_HEADER_ONLY
#include "profiler.h"

#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <kineto/GenericTraceActivity.h>
#include <kineto/IActivityProfiler.h>
#include <kineto/ThreadUtil.h>
#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "runtime.h"

namespace spyre::backend::profiling {
namespace {

struct Submitted {
  int device;
  int64_t stream;
  const driver::Queue* queue;
  uint64_t seq;
  Kind kind;
  std::string name;
  uint64_t bytes;
  uint64_t correlation;
  int64_t host_ns;      // when the host submitted it
  int32_t host_thread;  // the submitting thread (the system's id, as kineto's CPU ops name it)
};

struct Anchor {
  int64_t host_ns;
  uint64_t cycle;
  double mhz;
};

std::atomic<bool> g_active{false};
std::mutex g_mu;
std::vector<Submitted> g_submitted;
std::map<std::pair<const driver::Queue*, uint64_t>, hw::Completion> g_completed;
std::map<int, Anchor> g_anchors;  // per device, taken at session start
thread_local std::vector<uint64_t> t_correlation;

// Kineto's in-memory logger keeps pointers to the activities it is given, and the profiler's
// result may be exported long after the session: keep the activities of the last few sessions.
constexpr size_t kSessionsKept = 16;
std::deque<std::deque<libkineto::GenericTraceActivity>> g_kept;

void anchor_devices() {
  g_anchors.clear();
  for (int i = 0; i < DeviceRuntime::count(); ++i) {
    if (!DeviceRuntime::opened(i)) continue;
    DeviceRuntime& rt = DeviceRuntime::get(i);
    g_anchors[i] = {c10::getTime(), rt.device().cycles(), static_cast<double>(rt.device().info().card.clock_mhz)};
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    {
      std::lock_guard lock(g_mu);
      g_submitted.clear();
      g_completed.clear();
      try {
        anchor_devices();
      } catch (const std::exception& e) {
        errors_.push_back(e.what());
      }
    }
    g_active = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    // Wait for what was queued, so that every submitted command has its completion record (device
    // errors stay for the user's next synchronize).
    for (int i = 0; i < DeviceRuntime::count(); ++i) {
      if (DeviceRuntime::opened(i)) DeviceRuntime::get(i).drain();
    }
    g_active = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t /*start*/,
                    int64_t /*end*/) override {
    std::lock_guard lock(g_mu);
    auto& kept = g_kept.emplace_back();
    if (g_kept.size() > kSessionsKept) g_kept.pop_front();
    for (const Submitted& s : g_submitted) {
      const auto done = g_completed.find({s.queue, s.seq});
      const auto anchor = g_anchors.find(s.device);
      if (done == g_completed.end() || anchor == g_anchors.end()) continue;
      const hw::Completion& c = done->second;
      auto to_ns = [&](uint64_t cycle) {
        const double cycles = static_cast<double>(cycle) - static_cast<double>(anchor->second.cycle);
        return anchor->second.host_ns + static_cast<int64_t>(cycles * 1e3 / anchor->second.mhz);
      };
      libkineto::GenericTraceActivity& a = kept.emplace_back();
      a.activityType =
          s.kind == Kind::kKernel ? libkineto::ActivityType::CONCURRENT_KERNEL : libkineto::ActivityType::GPU_MEMCPY;
      a.activityName = s.name;
      a.startTime = to_ns(c.start_cycle);
      a.endTime = std::max(to_ns(c.end_cycle), a.startTime + 1);
      a.device = s.device;
      a.resource = s.stream;
      a.id = static_cast<int32_t>(s.correlation);
      a.flow.id = static_cast<uint32_t>(s.correlation);
      a.flow.type = libkineto::kLinkAsyncCpuGpu;
      a.flow.start = false;
      if (linked && s.correlation != 0) a.linked = linked(static_cast<int32_t>(s.correlation));
      a.addMetadata("stream", s.stream);
      a.addMetadata("device", s.device);
      a.addMetadata("start cycle", c.start_cycle);
      a.addMetadata("end cycle", c.end_cycle);
      if (s.kind == Kind::kMemcpy) a.addMetadata("bytes", s.bytes);
      streams_.insert({s.device, s.stream});
      logger.handleGenericActivity(a);
      if (s.correlation == 0) continue;
      // The host side of the same command: its submission on the CPU thread that queued it, where
      // the flow from the op to the device event starts (as cudaLaunchKernel's does on a GPU).
      libkineto::GenericTraceActivity& r = kept.emplace_back();
      r.activityType = libkineto::ActivityType::PRIVATEUSE1_RUNTIME;
      r.activityName = s.kind == Kind::kKernel ? "spyreLaunchKernel" : "spyreMemcpyAsync";
      r.startTime = s.host_ns;
      r.endTime = s.host_ns + 1;
      r.device = libkineto::processId();
      r.resource = s.host_thread;
      r.id = static_cast<int32_t>(s.correlation);
      r.flow.id = static_cast<uint32_t>(s.correlation);
      r.flow.type = libkineto::kLinkAsyncCpuGpu;
      r.flow.start = true;
      if (linked) r.linked = linked(static_cast<int32_t>(s.correlation));
      logger.handleGenericActivity(r);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    out.reserve(streams_.size());
    for (const auto& [device, stream] : streams_) {
      out.push_back({stream, stream, device, "spyre stream " + std::to_string(stream)});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override { t_correlation.push_back(id); }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

 private:
  std::vector<std::string> errors_;
  std::set<std::pair<int, int64_t>> streams_;
};

class Profiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& /*config*/) override {
    for (const auto t : types) {
      if (activities_.count(t)) return std::make_unique<Session>();
    }
    return nullptr;  // spyre activity was not asked for
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "spyre";
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                                libkineto::ActivityType::PRIVATEUSE1_DRIVER};
};

const bool g_registered = [] {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<Profiler>(); });
  return true;
}();

}  // namespace

bool active() noexcept {
  return g_active.load(std::memory_order_relaxed);
}

void note(int device, int64_t stream, const driver::Queue& q, uint64_t seq, Kind kind, const std::string& name,
          uint64_t bytes) {
  if (!active()) return;
  const uint64_t correlation = t_correlation.empty() ? 0 : t_correlation.back();
  std::lock_guard lock(g_mu);
  g_submitted.push_back(
      {device, stream, &q, seq, kind, name, bytes, correlation, c10::getTime(), libkineto::systemThreadId()});
}

void watch(driver::Queue& q) {
  q.observe([queue = &q](hw::Opcode op, const hw::Completion& c) {
    if (!active() || (op != hw::Opcode::kLaunch && op != hw::Opcode::kCopy)) return;
    std::lock_guard lock(g_mu);
    g_completed[{queue, c.seq}] = c;
  });
}

}  // namespace spyre::backend::profiling
