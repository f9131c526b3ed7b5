// The device runtime's programs and launches: the program cache, op labels, one launch, and a
// compiled graph's sequence of launches with their argument blocks in one upload.
#include "runtime.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include <c10/util/Exception.h>

#include "profiler.h"
#include "spyre/common/launch_file.h"
#include "spyre/driver/driver.h"
#include "spyre/hw/commands.h"

namespace spyre::backend {

// The device copy of an op name, written once per name and kept: there are a few hundred at most.
uint64_t DeviceRuntime::label(const std::string& op) {
  if (op.empty()) return 0;
  if (const uint64_t found = labels_.find(op)) return found;
  const std::string text = op.substr(0, hw::kMaxLabelBytes - 1);
  const uint64_t addr = alloc_reclaiming(text.size() + 1);
  upload(addr, text.c_str(), text.size() + 1);
  wait(queue(), queue().last_seq());  // any stream may use it next
  const uint64_t kept = labels_.keep(op, addr);
  if (kept != addr) free(addr);  // another thread wrote it meanwhile
  return kept;
}

void DeviceRuntime::launch(const std::string& key, const std::function<compiler::Program()>& build,
                           const std::vector<uint64_t>& args, const std::string& op) {
  std::vector<LoadedProgram> evicted;
  uint64_t seq = 0;
  {
    // Held until the launch is queued: an evicted program's memory is freed only under the
    // exclusive lock, so no launch between finding a program and queueing it sees it freed.
    std::shared_lock using_programs(programs_rw_);
    seq = submit_launch(key, build, args, op, &evicted);
  }
  if (seq != 0 && launch_blocking()) wait(queue(), seq);  // a fault raises at the op that launched it
  if (evicted.empty()) return;
  // Work queued on any stream may still run an evicted program: let it finish first (evictions
  // are rare: the cache holds thousands of programs).
  std::unique_lock freeing(programs_rw_);
  drain();
  for (const LoadedProgram& e : evicted) free(e.addr);
}

LoadedProgram DeviceRuntime::loaded(const std::string& key, const std::function<compiler::Program()>& build,
                                    size_t num_args, std::vector<LoadedProgram>* evicted) {
  if (std::optional<LoadedProgram> found = programs_.find(key)) return *found;
  const compiler::Program p = build();
  TORCH_INTERNAL_ASSERT(p.num_args <= num_args, "spyre: program ", p.name, " needs ", p.num_args, " arguments");
  hw::ProgramHeader header{};
  std::memcpy(&header, p.image.data(), std::min(sizeof header, p.image.size()));
  const LoadedProgram mine{alloc_reclaiming(p.image.size()),
                           p.image.size(),
                           p.core_mask,
                           p.name,
                           header.strings_size > 0,
                           std::make_shared<const compiler::ProgramNotes>(p.notes)};
  upload(mine.addr, p.image.data(), p.image.size());
  wait(queue(), queue().last_seq());  // any stream may launch it next
  LoadedProgram prog{};
  const std::vector<LoadedProgram> out = programs_.insert(key, mine, &prog);
  evicted->insert(evicted->end(), out.begin(), out.end());
  if (prog.addr != mine.addr) free(mine.addr);  // another thread loaded the same program meanwhile
  return prog;
}

uint64_t DeviceRuntime::submit_launch(const std::string& key, const std::function<compiler::Program()>& build,
                                      const std::vector<uint64_t>& args, const std::string& op,
                                      std::vector<LoadedProgram>* evicted) {
  const LoadedProgram prog = loaded(key, build, args.size(), evicted);
  TORCH_CHECK(args.size() <= hw::kMaxLaunchArgs, "spyre: too many launch arguments (", args.size(), ")");
  const uint64_t op_label = label(op);
  if (CaptureSink* sink = capture_sink()) {  // a captured graph replays from device memory it owns
    const uint64_t args_bytes = args.size() * sizeof(uint64_t);
    const uint64_t args_addr = alloc_reclaiming(hw::kMaxLaunchArgs * sizeof(uint64_t));
    upload(args_addr, args.data(), args_bytes);
    sink->launch(prog, args_addr, args_bytes, op_label, prog.name);
    return 0;
  }
  return queue_launch(queue(), prog, args, op_label);
}

std::string DeviceRuntime::failed_launch(const hw::Descriptor& d, const hw::Completion& c) {
  if (d.opcode != hw::Opcode::kLaunch) return {};
  const std::string op = d.launch.label != 0 ? labels_.op_at(d.launch.label) : std::string();
  const std::optional<LoadedProgram> prog = programs_.at_address(d.launch.program);
  if (op.empty() && !prog) return {};
  std::string what = ", in ";
  what += op.empty() ? "a launch" : op;
  if (prog) what += " (kernel '" + prog->name + "')";
  // The faulting instruction, read back from the program, which the cache still holds.
  const bool at_instruction = c.error == hw::ErrorCode::kCoreFault || c.error == hw::ErrorCode::kWatchdog ||
                              c.error == hw::ErrorCode::kEccError || c.error == hw::ErrorCode::kSanitizerReport;
  if (!prog || !at_instruction) return what;
  try {
    hw::ProgramHeader h{};
    d2h(&h, prog->addr, sizeof h);
    const uint32_t index = c.detail & 0xffffff;
    const uint64_t at = uint64_t{h.instr_offset} + uint64_t{index} * sizeof(hw::Instr);
    if (h.magic != hw::kProgramMagic || index >= h.num_instrs || at + sizeof(hw::Instr) > prog->size) return what;
    hw::Instr in{};
    d2h(&in, prog->addr + at, sizeof in);
    what += c10::str("; instruction ", index, " is ", compiler::disassemble(in));
  } catch (const c10::Error& e) {  // the card cannot be read now: the error says what it knows
    what += c10::str("; its instruction could not be read back (", e.what_without_backtrace(), ")");
  }
  return what;
}

bool launch_blocking() {
  // Read once: CUDA_LAUNCH_BLOCKING's counterpart, for finding which op faulted.
  static const bool on = [] {
    const char* env = std::getenv("TORCH_SPYRE_LAUNCH_BLOCKING");
    return env != nullptr && std::string(env) == "1";
  }();
  return on;
}

void DeviceRuntime::capture_next_launch(const std::string& path, const std::string& op) {
  std::lock_guard lock(capture_mu_);
  capture_path_ = path;
  capture_op_ = op;
  captured_ = false;
  capture_armed_ = true;
}

bool DeviceRuntime::end_launch_capture() {
  std::lock_guard lock(capture_mu_);
  capture_armed_ = false;
  return std::exchange(captured_, false);
}

uint64_t DeviceRuntime::capture_launch(driver::Queue& q, const LoadedProgram& prog, const std::vector<uint64_t>& args,
                                       uint64_t op_label, const std::string& path) {
  launchfile::LaunchFile f;
  f.kernel = prog.name;
  f.op = op_label != 0 ? labels_.op_at(op_label) : std::string();
  f.core_mask = prog.core_mask;
  f.fp16_dlfloat = device_->info().fp16_dlfloat;
  // Every argument that points into a driver allocation (a tensor's segment) takes that whole
  // allocation along; the others are values.
  for (const uint64_t a : args) {
    launchfile::Arg arg;
    uint64_t base = 0, size = 0;
    if (device_->allocation_at(a, &base, &size)) {
      arg.in_block = true;
      arg.offset = a - base;
      size_t i = 0;
      while (i < f.blocks.size() && f.blocks[i].addr != base) ++i;
      if (i == f.blocks.size()) f.blocks.push_back({base, size, {}, {}});
      arg.block = static_cast<uint32_t>(i);
    } else {
      arg.value = a;
    }
    f.args.push_back(arg);
  }
  synchronize();  // the card idle: the launch runs alone, on memory as it is now
  f.program.resize(prog.size);
  d2h(f.program.data(), prog.addr, prog.size);
  for (launchfile::Block& b : f.blocks) {
    b.input.resize(b.size);
    d2h(b.input.data(), b.addr, b.size);
  }
  uint64_t seq = 0;
  SPYRE_CHECK(q.launch(prog.addr, prog.size, args.data(), args.size(), prog.core_mask, op_label, &seq));
  wait(q, seq);
  for (launchfile::Block& b : f.blocks) {
    b.output.resize(b.size);
    d2h(b.output.data(), b.addr, b.size);
  }
  try {
    f.save(path);
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "spyre: capture_launch: ", e.what());
  }
  return seq;
}

uint64_t DeviceRuntime::queue_launch(driver::Queue& q, const LoadedProgram& prog, const std::vector<uint64_t>& args,
                                     uint64_t op_label) {
  // The arguments travel in the queue's argument ring: no copy command, no device memory.
  uint64_t seq = 0;
  std::string capture_to;
  if (capture_armed_.load(std::memory_order_relaxed)) {
    std::lock_guard lock(capture_mu_);
    if (capture_armed_ && (capture_op_.empty() || (op_label != 0 && labels_.op_at(op_label) == capture_op_))) {
      capture_armed_ = false;
      captured_ = true;
      capture_to = capture_path_;
    }
  }
  if (prog.prints) use_print_buffer(q);
  if (!capture_to.empty()) {
    seq = capture_launch(q, prog, args, op_label, capture_to);
  } else {
    SPYRE_CHECK(q.launch(prog.addr, prog.size, args.data(), args.size(), prog.core_mask, op_label, &seq));
  }
  {
    std::lock_guard lock(last_mu_);
    last_program_[op_label] = prog.addr;
    last_program_[0] = prog.addr;
  }
  profiling::note(index_, current_stream(), q, seq, profiling::Kind::kKernel, prog.name, 0);
  return seq;
}

void DeviceRuntime::launch_sequence(const std::vector<LaunchRequest>& launches) {
  if (launches.empty()) return;
  if (capture_sink() != nullptr) {  // a capture owns each argument block
    for (const LaunchRequest& r : launches) launch(r.key, r.build, r.args, r.op);
    return;
  }
  std::vector<LoadedProgram> evicted;
  uint64_t last = 0;
  {
    std::shared_lock using_programs(programs_rw_);
    // Every program is loaded before the first launch is queued.
    std::vector<LoadedProgram> progs;
    for (const LaunchRequest& r : launches) {
      TORCH_CHECK(r.args.size() <= hw::kMaxLaunchArgs, "spyre: too many launch arguments (", r.args.size(), ")");
      progs.push_back(loaded(r.key, r.build, r.args.size(), &evicted));
    }
    driver::Queue& q = queue();
    uint64_t seq = 0;
    for (size_t i = 0; i < launches.size(); ++i)
      seq = queue_launch(q, progs[i], launches[i].args, label(launches[i].op));
    if (launch_blocking()) last = seq;
  }
  if (last != 0) wait(queue(), last);  // launch blocking: a fault raises at the graph's call
  if (evicted.empty()) return;
  std::unique_lock freeing(programs_rw_);
  drain();
  for (const LoadedProgram& e : evicted) free(e.addr);
}

std::string DeviceRuntime::listing(const std::string& op) {
  const uint64_t op_label = op.empty() ? 0 : labels_.find(op);
  uint64_t addr = 0;
  {
    std::lock_guard lock(last_mu_);
    const auto it = last_program_.find(op_label);
    if ((op.empty() || op_label != 0) && it != last_program_.end()) addr = it->second;
  }
  const std::optional<LoadedProgram> prog = addr != 0 ? programs_.at_address(addr) : std::nullopt;
  if (!prog) {
    std::string launched;
    {
      std::lock_guard lock(last_mu_);
      for (const auto& [label, program] : last_program_) {
        const std::string name = label != 0 ? labels_.op_at(label) : std::string();
        if (!name.empty()) launched += (launched.empty() ? "" : ", ") + name;
      }
    }
    TORCH_CHECK_VALUE(false, "spyre: device ", index_, " has no loaded program of ",
                      op.empty() ? std::string("any launch") : "a launch of " + op,
                      launched.empty() ? std::string(" (nothing launched yet)") : " (ops launched: " + launched + ")");
  }
  // The image was uploaded and waited for when it was loaded; it is read back as it ran.
  std::vector<uint8_t> image(prog->size);
  d2h(image.data(), prog->addr, image.size());
  return c10::str("; kernel '", prog->name, "'", op.empty() ? std::string() : " launched by " + op, "\n",
                  compiler::listing(image, prog->notes ? *prog->notes : compiler::ProgramNotes{}));
}

ProgramCacheStats DeviceRuntime::program_cache_stats() {
  return programs_.stats();
}

}  // namespace spyre::backend
