// The Python extension torch_spyre._C: its module initialiser (device-memory functions are bound
// in memory_bindings.cpp). Loading it registers the device (guard, hooks, allocator, kernels)
// through static initialisers in the other files.
#include <c10/util/StringUtil.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <pythread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "aten_util.h"
#include "boxed.h"
#include "compiled_graph.h"
#include "graph.h"
#include "memory_bindings.h"
#include "pointwise_common.h"
#include "process_group.h"
#include "runtime.h"
#include "sanitizer.h"
#include "spyre/compiler/errors.h"
#include "spyre/compiler/ktir.h"
#include "spyre/compiler/ops.h"
#include "spyre/compiler/program.h"
#include "spyre/driver/driver.h"
#include "spyre/hw/commands.h"
#include "spyre/sim/inproc.h"
#include "spyre/simd/channel.h"

namespace py = pybind11;
using spyre::backend::DeviceRuntime;

namespace {

// ---- Host waits that Ctrl-C and a timeout can end -----------------------------------------------
// While the main thread waits on the card inside C++, Python cannot run its SIGINT handler. A C
// handler chained in front of Python's notes the signal; the driver's wait policy looks at the note
// every few milliseconds, and on the main thread runs Python's handlers, so that the wait ends with
// the KeyboardInterrupt they raise (the work on the card goes on). Replacing the SIGINT handler
// with signal.signal() later removes the note: waits then finish before the handler runs.
std::atomic<bool> g_sigint{false};
struct sigaction g_prev_sigint;
unsigned long g_main_thread = 0;
PyObject *g_exc_type = nullptr, *g_exc_value = nullptr, *g_exc_tb = nullptr;  // the interrupt, for re-raising

void on_sigint(int sig, siginfo_t* info, void* context) {
  g_sigint.store(true);
  if (g_prev_sigint.sa_flags & SA_SIGINFO) {
    if (g_prev_sigint.sa_sigaction) g_prev_sigint.sa_sigaction(sig, info, context);
  } else if (g_prev_sigint.sa_handler == SIG_DFL) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  } else if (g_prev_sigint.sa_handler != SIG_IGN) {
    g_prev_sigint.sa_handler(sig);
  }
}

spyre::driver::Status python_interrupted() {
  if (!g_sigint.load(std::memory_order_relaxed) || PyThread_get_thread_ident() != g_main_thread) return {};
  if (!Py_IsInitialized()) return {};
  g_sigint.store(false);
  PyGILState_STATE gil = PyGILState_Ensure();
  spyre::driver::Status s;
  if (PyErr_CheckSignals() != 0) {  // a handler raised: end the wait with it
    PyErr_Fetch(&g_exc_type, &g_exc_value, &g_exc_tb);
    s = {spyre::driver::StatusCode::kInterrupted, "spyre: a wait on the card was interrupted"};
  }
  PyGILState_Release(gil);
  return s;
}

[[noreturn]] void raise_interrupt() {
  py::gil_scoped_acquire gil;
  PyErr_Restore(g_exc_type, g_exc_value, g_exc_tb);
  g_exc_type = g_exc_value = g_exc_tb = nullptr;
  throw py::error_already_set();
}

std::chrono::milliseconds g_timeout{0};

void install_wait_policy() {
  spyre::driver::WaitPolicy policy;
  policy.timeout = g_timeout;
  policy.interrupted = python_interrupted;
  spyre::driver::set_wait_policy(std::move(policy));
}

void set_wait_timeout(double seconds) {
  TORCH_CHECK_VALUE(std::isfinite(seconds) && seconds >= 0,
                    "torch_spyre: a wait timeout is a number of seconds >= 0 (0: none), not ", seconds);
  g_timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
  install_wait_policy();
}

void init_waits() {
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  struct sigaction sa = {};
  sa.sa_sigaction = on_sigint;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigaction prev = {};
  if (sigaction(SIGINT, nullptr, &prev) == 0 && prev.sa_sigaction != on_sigint) {
    g_prev_sigint = prev;
    sigaction(SIGINT, &sa, nullptr);
  }
  double seconds = 0;
  if (const char* env = std::getenv("TORCH_SPYRE_WAIT_TIMEOUT"); env && *env) {
    char* end = nullptr;
    seconds = std::strtod(env, &end);
    TORCH_CHECK_VALUE(end && *end == 0 && std::isfinite(seconds) && seconds >= 0,
                      "torch_spyre: TORCH_SPYRE_WAIT_TIMEOUT must be a number of seconds >= 0 (0: none), not '", env,
                      "'");
  }
  set_wait_timeout(seconds);  // installs the wait policy
  spyre::backend::set_interrupt_raiser(raise_interrupt);
}

const char* mode_name(spyre::backend::FallbackMode m) {
  switch (m) {
    case spyre::backend::FallbackMode::kAllow:
      return "allow";
    case spyre::backend::FallbackMode::kWarn:
      return "warn";
    case spyre::backend::FallbackMode::kError:
      return "error";
  }
  return "warn";
}

py::dict device_status(int index) {
  const spyre::driver::DeviceStatus st = DeviceRuntime::get(index).device().status();
  py::dict d;
  d["index"] = st.info.index;
  d["transport"] = spyre::driver::Driver::instance().transport_name();
  d["interface_version"] = st.interface_version;
  d["firmware_ready"] = st.firmware_ready;
  d["answers"] = st.answers;
  d["cores"] = st.info.card.cores;
  d["clock_mhz"] = st.info.card.clock_mhz;
  d["cycles"] = st.cycles;
  d["memory_total"] = st.memory.total;
  d["memory_used"] = st.memory.allocated;
  d["memory_free"] = st.memory.total - st.memory.allocated;
  d["memory_peak"] = st.memory.peak;
  d["interrupts"] = st.interrupts;
  py::list queues;
  for (const spyre::driver::QueueStatus& q : st.queues) {
    py::dict e;
    e["id"] = q.id;
    e["open"] = q.open;
    e["enabled"] = q.enabled;
    e["error"] = q.error ? spyre::hw::error_name(q.last_error) : "";
    e["halted"] = q.halted;
    e["entries"] = q.entries;
    e["head"] = q.head;
    e["tail"] = q.tail;
    e["pending"] = q.tail - q.head;
    e["resets"] = q.resets;
    e["priority"] = q.high_priority ? "high" : "normal";
    queues.append(e);
  }
  d["queues"] = queues;
  return d;
}

py::dict device_info(int index) {
  const spyre::driver::DeviceInfo& i = DeviceRuntime::get(index).device().info();
  py::dict d;
  d["name"] = "IBM Spyre (simulated)";
  d["transport"] = spyre::driver::Driver::instance().transport_name();
  d["vendor_id"] = i.vendor_id;
  d["device_id"] = i.device_id;
  d["cores"] = i.card.cores;
  d["queues"] = i.num_queues;
  d["clock_mhz"] = i.card.clock_mhz;
  d["memory_bytes"] = i.memory_bytes;
  d["memory_base"] = i.memory_base;  // the first usable address: 0, or this client's window on a shared card
  d["lx_bytes"] = i.card.lx_bytes;
  d["corelets"] = i.card.corelets;
  d["pt_array"] = py::make_tuple(i.card.pt_rows, i.card.pt_cols, i.card.pt_simd);  // rows, cols, fp16 lanes
  d["fp32_rate"] = i.card.fp32_rate;
  d["sfp_lanes"] = i.card.sfp_lanes;
  d["ring_bytes_per_cycle"] = i.card.ring_bytes_per_cycle;
  d["memory_controllers"] = i.card.memory_controllers;
  d["memory_bandwidth_gbps"] = static_cast<double>(i.card.memory_mbps) / 1000;
  d["fp16_format"] = i.fp16_dlfloat ? "dlfloat16" : "ieee";
  return d;
}

// Submits 64 raw descriptor bytes on a fresh queue of `index` and returns its completion record.
// For debugging and for tests of the firmware's validation through the whole stack.
py::dict submit_raw_descriptor(int index, const py::bytes& raw) {
  const std::string bytes = raw;
  TORCH_CHECK_VALUE(bytes.size() == sizeof(spyre::hw::Descriptor), "spyre: a descriptor is ",
                    sizeof(spyre::hw::Descriptor), " bytes, got ", bytes.size());
  spyre::hw::Descriptor d;
  std::memcpy(&d, bytes.data(), sizeof d);
  TORCH_CHECK_VALUE(d.opcode != spyre::hw::Opcode::kWait,
                    "spyre: submit_raw_descriptor does not take WAIT descriptors: one that no SIGNAL satisfies "
                    "would hold the queue, and this call, forever");
  std::unique_ptr<spyre::driver::Queue> q;
  SPYRE_CHECK(DeviceRuntime::get(index).device().create_queue(4, &q));
  uint64_t seq = 0;
  SPYRE_CHECK(q->submit_raw(d, &seq));
  const spyre::driver::Status waited = q->wait(seq);
  if (waited.code() == spyre::driver::StatusCode::kTimeout ||
      waited.code() == spyre::driver::StatusCode::kInterrupted) {
    SPYRE_CHECK(waited);  // the host stopped waiting: there is no completion to report
  }
  spyre::hw::Completion c{};
  SPYRE_CHECK(q->completion(seq, &c));
  py::dict out;
  out["ok"] = waited.ok();
  out["message"] = waited.message();
  out["error"] = spyre::hw::error_name(c.error);
  out["field"] = spyre::hw::field_name(c.field);
  out["cycles"] = c.end_cycle - c.start_cycle;
  return out;
}

// Wall seconds of `count` empty commands (a NOP), each submitted on a queue of its own and waited
// for: the command path's round trip, driver to card and back, without any work on the card.
std::vector<double> empty_command_round_trips(int index, int count) {
  TORCH_CHECK_VALUE(count >= 1, "spyre: count must be at least 1");
  std::unique_ptr<spyre::driver::Queue> q;
  SPYRE_CHECK(DeviceRuntime::get(index).device().create_queue(64, &q));
  spyre::hw::Descriptor nop{};
  nop.opcode = spyre::hw::Opcode::kNop;
  std::vector<double> out;
  for (int i = 0; i < count; ++i) {
    const auto start = std::chrono::steady_clock::now();
    uint64_t seq = 0;
    SPYRE_CHECK(q->submit_raw(nop, &seq));
    SPYRE_CHECK(q->wait(seq));
    out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  // The card in this process is the default transport; the driver links no simulator of its own.
  spyre::sim::register_inproc_transport();
  m.doc() = "torch_spyre native module: the Spyre PrivateUse1 device";
  if (!spyre::backend::unknown_names().empty()) {  // kernels registered for ops torch does not have
    throw py::import_error("torch_spyre: kernels are registered for ops this torch does not have: aten::" +
                           c10::Join(", aten::", spyre::backend::unknown_names()));
  }
  init_waits();
  m.def("_set_wait_timeout", [](double seconds) {
    HANDLE_TH_ERRORS
    set_wait_timeout(seconds);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_get_wait_timeout", [] { return g_timeout.count() / 1000.0; });
  m.def("_empty_command_round_trips", [](int index, int count) {
    HANDLE_TH_ERRORS
    py::gil_scoped_release no_gil;
    return empty_command_round_trips(index, count);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_daemon_status", [](const std::string& socket_path) {
    HANDLE_TH_ERRORS
    std::string json;
    const std::string why = spyre::simd::query_status(socket_path, &json);
    TORCH_CHECK(why.empty(), "spyre-smi: ", why);
    return json;
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_device_status", [](int index) {
    HANDLE_TH_ERRORS
    return device_status(index);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_device_address", [](const at::Tensor& t) {
    HANDLE_TH_ERRORS
    TORCH_CHECK_VALUE(t.device().type() == c10::DeviceType::PrivateUse1,
                      "spyre: device_address takes a spyre tensor, not ", t.device());
    return spyre::backend::device_addr(t);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  // dst.copy_(src) across cards with no wait on either side: queued on the current stream of src's
  // card, for collectives, which order it with events.
  m.def(
      "_peer_copy_async",
      [](const at::Tensor& dst, const at::Tensor& src, const std::string& label) {
        HANDLE_TH_ERRORS
        TORCH_CHECK_VALUE(dst.is_privateuseone() && src.is_privateuseone() && dst.device() != src.device(),
                          "spyre: _peer_copy_async copies between two spyre devices, not ", src.device(), " and ",
                          dst.device());
        TORCH_CHECK_VALUE(
            dst.is_contiguous() && src.is_contiguous() && dst.dtype() == src.dtype() && dst.numel() == src.numel(),
            "spyre: _peer_copy_async needs contiguous tensors of one dtype and size");
        const c10::DeviceGuard guard(src.device());
        DeviceRuntime::get(src.device().index())
            .copy_to_peer_async(dst.device().index(), spyre::backend::device_addr(dst),
                                spyre::backend::device_addr(src), src.nbytes(), label);
        END_HANDLE_TH_ERRORS_PYBIND
      },
      py::arg("dst"), py::arg("src"), py::arg("label") = "");
  // Memory shared between processes of one spyre-simd, for torch.distributed's collectives on the
  // cards (torch_spyre/_group_comm.py). Addresses are device addresses and IOVAs, as ints.
  m.def("_ipc_export", [](int index) {
    HANDLE_TH_ERRORS
    return DeviceRuntime::get(index).ipc_export();
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_ipc_open", [](int index, uint64_t handle) {
    HANDLE_TH_ERRORS
    const auto w = DeviceRuntime::get(index).ipc_open(handle);
    return py::make_tuple(w.iova, w.card, w.addr, w.bytes);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  // src's bytes to `iova` (inside an _ipc_open window), queued on the current stream of src's card.
  m.def(
      "_copy_to_iova_async",
      [](uint64_t iova, const at::Tensor& src, const std::string& label) {
        HANDLE_TH_ERRORS
        TORCH_CHECK_VALUE(src.is_privateuseone() && src.is_contiguous(),
                          "spyre: _copy_to_iova_async copies a contiguous spyre tensor, not one on ", src.device());
        const c10::DeviceGuard guard(src.device());
        DeviceRuntime::get(src.device().index())
            .copy_to_iova_async(iova, spyre::backend::device_addr(src), src.nbytes(), label);
        END_HANDLE_TH_ERRORS_PYBIND
      },
      py::arg("iova"), py::arg("src"), py::arg("label") = "");
  m.def("_stream_wait_value", [](int index, int64_t stream, uint64_t iova, uint64_t value) {
    HANDLE_TH_ERRORS
    DeviceRuntime& rt = DeviceRuntime::get(index);
    rt.check_stream(stream);
    rt.wait_value(stream, iova, value);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_stream_signal_state", [](int index, int64_t stream) {
    HANDLE_TH_ERRORS
    DeviceRuntime& rt = DeviceRuntime::get(index);
    rt.check_stream(stream);
    return rt.stream_signal_state(stream);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  spyre::backend::bind_memory(m);
  spyre::backend::bind_process_group(m);
  m.def("_device_count", [] { return DeviceRuntime::count(); });
  m.def("_current_device", [] { return spyre::backend::current_device(); });
  m.def("_set_device", [](int index) {
    HANDLE_TH_ERRORS
    DeviceRuntime::get(index);
    spyre::backend::set_current_device(index);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_synchronize", [](int index) {
    HANDLE_TH_ERRORS
    py::gil_scoped_release no_gil;
    DeviceRuntime::get(index).synchronize();
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_device_cycles", [](int index) {
    HANDLE_TH_ERRORS
    return DeviceRuntime::get(index).device().cycles();
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_device_info", [](int index) {
    HANDLE_TH_ERRORS
    return device_info(index);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_default_generator", [](int index) {
    HANDLE_TH_ERRORS
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(spyre::backend::default_generator(static_cast<c10::DeviceIndex>(index))));
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_program_cache_stats", [](int index) {
    HANDLE_TH_ERRORS
    const spyre::backend::ProgramCacheStats s = DeviceRuntime::get(index).program_cache_stats();
    py::dict d;
    d["entries"] = s.entries;
    d["bytes"] = s.bytes;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["evictions"] = s.evictions;
    return d;
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_listing", [](int index, const std::string& op) {
    HANDLE_TH_ERRORS
    return DeviceRuntime::get(index).listing(op);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_sanitize_checks", [](int index, const std::string& list) {
    HANDLE_TH_ERRORS
    spyre::backend::sanitizer::set_checks(index, spyre::backend::sanitizer::parse(list, "torch_spyre.debug.sanitize"));
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_sanitize_env", [] {
    HANDLE_TH_ERRORS
    const uint64_t bits = spyre::backend::sanitizer::checks();
    std::string names;
    for (const auto& [bit, name] :
         {std::pair{spyre::hw::kSanitizeMemcheck, "memcheck"}, std::pair{spyre::hw::kSanitizeRacecheck, "racecheck"},
          std::pair{spyre::hw::kSanitizeInitcheck, "initcheck"}}) {
      if (bits & bit) names += (names.empty() ? "" : ",") + std::string(name);
    }
    return names;
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_watch", [](int index, int64_t stream, uint64_t addr, uint64_t bytes) {
    HANDLE_TH_ERRORS
    return spyre::backend::sanitizer::watch(index, stream, addr, bytes);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_unwatch", [](int index, int64_t stream, uint64_t id) {
    HANDLE_TH_ERRORS
    spyre::backend::sanitizer::unwatch(index, stream, id);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_break_at", [](int index, int64_t stream, uint64_t buffer, uint64_t bytes, int64_t pc, uint32_t rank) {
    HANDLE_TH_ERRORS
    spyre::backend::sanitizer::break_at(index, stream, buffer, bytes, pc, rank);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_capture_next_launch", [](int index, const std::string& path, const std::string& op) {
    HANDLE_TH_ERRORS
    DeviceRuntime::get(index).capture_next_launch(path, op);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_end_launch_capture", [](int index) {
    HANDLE_TH_ERRORS
    return DeviceRuntime::get(index).end_launch_capture();
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_write_reports", [] {
    HANDLE_TH_ERRORS
    std::string trace, stats;
    TORCH_CHECK(!spyre::driver::Driver::forked_child(), "spyre: no simulator in a forked child");
    spyre::driver::Driver& drv = spyre::driver::Driver::instance();
    spyre::backend::check_status(drv.transport_status(), "_write_reports");
    spyre::backend::check_status(drv.transport()->write_sim_reports(&trace, &stats), "_write_reports");
    return py::make_tuple(trace, stats);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_set_cpu_fallback", [](const std::string& mode) {
    HANDLE_TH_ERRORS
    spyre::backend::set_fallback_mode(spyre::backend::parse_fallback_mode(mode));
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_get_cpu_fallback", [] { return mode_name(spyre::backend::fallback_mode()); });
  m.def(
      "_fallback_counts", [](bool reset) { return spyre::backend::fallback_counts(reset); }, py::arg("reset") = false);
  // "aten::op.overload": its operator handle.
  const auto operator_named = [](const std::string& name) {
    const auto dot = name.find('.');
    return c10::Dispatcher::singleton().findSchemaOrThrow(name.substr(0, dot).c_str(),
                                                          dot == std::string::npos ? "" : name.substr(dot + 1).c_str());
  };
  // Runs ATen operator `name` ("aten::op.overload") through the CPU fallback, under its policy: for a
  // decomposed op (torch_spyre/_decomposed.py) whose decomposition does not take the call.
  m.def("_run_on_cpu", [operator_named](const std::string& name, const py::args& args, const py::kwargs& kwargs) {
    HANDLE_TH_ERRORS
    const c10::OperatorHandle op = operator_named(name);
    torch::jit::Stack stack = torch::jit::createStackForSchema(op.schema(), args, kwargs, std::nullopt);
    {
      const py::gil_scoped_release nogil;
      spyre::backend::run_on_cpu(op, &stack);
    }
    return torch::jit::createPyObjectForStack(std::move(stack));
    END_HANDLE_TH_ERRORS_PYBIND
  });
  // The eager kernels' check of a call's argument types against CPU's refusals (round of bool, sub
  // of bools; pointwise_common.h), for the torch.compile front door's planner: raises what CPU
  // raises for these types. Tensors are read for their type and rank only.
  m.def("_check_types_as_cpu",
        [operator_named](const std::string& name, const py::args& args, const py::kwargs& kwargs) {
          HANDLE_TH_ERRORS
          const c10::OperatorHandle op = operator_named(name);
          torch::jit::Stack stack = torch::jit::createStackForSchema(op.schema(), args, kwargs, std::nullopt);
          spyre::backend::check_types_as_cpu(spyre::backend::BoxedCall(op, &stack));
          END_HANDLE_TH_ERRORS_PYBIND
        });
  m.def("_is_in_bad_fork", [] { return spyre::driver::Driver::forked_child(); });
  m.def("_device_opened", [](int index) { return DeviceRuntime::opened(index); });
  m.def("_init", [](int index) { (void)DeviceRuntime::get(index); });
  m.def("_start", [] { DeviceRuntime::start(); });
  m.def("_register_graph_impl", [] { spyre::backend::register_graph_impl(); });
  // The compiler's two refusals (spyre/compiler/errors.h) as two Python types: a call no lowering
  // takes (the front door runs its ops one by one) and a malformed graph or document (a bug).
  py::register_exception<spyre::compiler::Unsupported>(m, "Unsupported", PyExc_NotImplementedError);
  py::register_exception<spyre::compiler::Malformed>(m, "Malformed", PyExc_ValueError);
  // The torch.compile front door (torch_spyre/_compile).
  m.def("_compile_graph", [](int device, const std::string& json) {
    const spyre::backend::ProgramBytes p = spyre::backend::compile_graph_json(device, json);
    return py::make_tuple(p.name, py::bytes(p.image), p.core_mask, p.num_args);
  });
  // KTIR kernels (torch_spyre.ktir): compiled for the device's card, launched as a compiled graph.
  m.def("_compile_ktir", [](int device, const std::string& text, const std::string& function) {
    const spyre::compiler::ktir::Kernel k =
        spyre::compiler::ktir::compile(text, spyre::backend::DeviceRuntime::get(device).target(), function);
    py::list arguments;
    for (const spyre::compiler::ktir::Argument& a : k.arguments) {
      arguments.append(py::make_tuple(a.name, spyre::hw::dtype_name(a.dtype), a.bytes));
    }
    py::dict work;
    work["load_bytes"] = k.work.load_bytes;
    work["store_bytes"] = k.work.store_bytes;
    work["macs"] = k.work.macs;
    work["sfp_elements"] = k.work.sfp_elements;
    py::dict out;
    out["name"] = k.program.name;
    out["image"] = py::bytes(reinterpret_cast<const char*>(k.program.image.data()), k.program.image.size());
    out["core_mask"] = k.program.core_mask;
    out["num_args"] = k.program.num_args;
    out["function"] = k.function;
    out["grid"] = k.grid;
    out["arguments"] = arguments;
    out["workspace_bytes"] = k.workspace_bytes;
    out["roofline_cycles"] = k.roofline_cycles;
    out["work"] = work;
    out["listing"] = spyre::compiler::ktir::listing(k, text);
    // Where each core's instructions start in the image, and the KTIR line of each (a fault's
    // instruction index names its line).
    const auto* header = reinterpret_cast<const spyre::hw::ProgramHeader*>(k.program.image.data());
    const auto* entries = reinterpret_cast<const uint32_t*>(k.program.image.data() + sizeof(spyre::hw::ProgramHeader));
    out["entries"] = std::vector<uint32_t>(entries, entries + header->num_entries);
    out["source_lines"] = k.source_lines;
    return out;
  });
  using ProgramHandle = std::shared_ptr<spyre::backend::ProgramHandle>;
  py::class_<spyre::backend::ProgramHandle, ProgramHandle>(m, "_Program")
      .def_property_readonly("key", [](const spyre::backend::ProgramHandle& p) { return p.key; })
      .def_property_readonly("name", [](const spyre::backend::ProgramHandle& p) { return p.program.name; });
  m.def("_program", [](const std::string& key, const std::string& name, const py::bytes& image, uint64_t core_mask,
                       uint32_t num_args) {
    HANDLE_TH_ERRORS
    return spyre::backend::make_program(key, {name, std::string(image), core_mask, num_args});
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_launch_graphs",
        [](const std::vector<std::tuple<ProgramHandle, std::vector<at::Tensor>, std::string>>& items) {
          HANDLE_TH_ERRORS
          std::vector<spyre::backend::GraphLaunch> launches;
          launches.reserve(items.size());
          for (const auto& [program, tensors, label] : items) launches.push_back({program, tensors, label});
          spyre::backend::launch_graphs(launches);
          END_HANDLE_TH_ERRORS_PYBIND
        });
  m.def("_compile_target", [](int device) {
    HANDLE_TH_ERRORS
    return spyre::backend::compile_target(device);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_program_listing", [](const py::bytes& image) {
    const std::string s(image);
    return spyre::compiler::listing(std::vector<uint8_t>(s.begin(), s.end()));
  });
  m.def("_op_catalogue", [] { return spyre::backend::op_catalogue(); });
  m.def("_limits", [] { return spyre::backend::limits(); });
  m.def("_examine_segment", [](const std::string& json) {
    py::list out;
    for (const spyre::compiler::ops::NodeInfo& n : spyre::compiler::ops::examine(json)) {
      out.append(py::make_tuple(
          n.temp_bytes, n.compute ? py::object(py::str(spyre::hw::dtype_name(*n.compute))) : py::object(py::none()),
          n.args));
    }
    return out;
  });
  m.def("_graph_ir", [](const std::string& json) { return spyre::backend::graph_ir_json(json); });
  m.def("_submit_raw_descriptor", [](int index, const py::bytes& raw) {
    HANDLE_TH_ERRORS
    return submit_raw_descriptor(index, raw);
    END_HANDLE_TH_ERRORS_PYBIND
  });
}
