// The PyTorch device's view of one Spyre card: its driver Device, the default queue, staging
// buffers for host copies, and loaded programs. Light header: no ATen.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/core/Storage.h>

#include "program_cache.h"
#include "runtime_parts.h"
#include "spyre/compiler/program.h"
#include "spyre/driver/device.h"

namespace spyre::backend {

/// Throws the c10 error matching a failed driver status; the one place statuses become exceptions.
void check_status(const driver::Status& s, const char* where);
/// How check_status raises a kInterrupted status: the Python module sets it to re-raise the
/// KeyboardInterrupt (or whatever the SIGINT handler raised) that ended the wait.
void set_interrupt_raiser(void (*raise)());
#define SPYRE_CHECK(expr) ::spyre::backend::check_status((expr), __func__)

/// The data pointer of a spyre tensor: device `index`'s memory appears from (index + 1) << 40
/// upward, so that a pointer names its device and two devices never hand out the same pointer
/// (torch.save tells storages apart by pointer). device_address() strips it for the driver.
inline constexpr int kDevicePointerShift = 40;
inline void* device_pointer(int index, uint64_t addr) {
  return reinterpret_cast<void*>((static_cast<uint64_t>(index) + 1) << kDevicePointerShift | addr);
}
inline uint64_t device_address(const void* p) {
  return reinterpret_cast<uint64_t>(p) & ((uint64_t{1} << kDevicePointerShift) - 1);
}

/// Pinned host memory (what pin_memory() returns): host buffers mapped for device `device`'s DMA,
/// which copies read and write in place, without staging.
struct PinnedHost {
  /// A mapped buffer of `bytes` for the current device; `ctx` is what unpin takes back.
  static void* pin(uint64_t bytes, void** ctx);
  /// The bytes pin() was asked for, from its `ctx`.
  static uint64_t bytes(const void* ctx);
  /// Waits for the device's queued work (a copy may still read the buffer), then unmaps it.
  static void unpin(void* ctx) noexcept;
  /// The device address (IOVA) of host bytes [p, p + n) if they lie in one pinned buffer of
  /// `device`; 0 otherwise.
  static uint64_t iova(const void* p, uint64_t n, int device);
  static bool contains(const void* p);
};

/// A recorded event: where a stream had got to when it was recorded. The card signals the
/// stream's timeline semaphore to `value` there (other streams wait on it without the host), and
/// with timing it also writes its cycle counter to timestamp slot `slot`.
struct StreamEvent {
  int device = -1;
  int64_t stream = 0;
  uint64_t seq = 0;    // the SIGNAL descriptor's sequence number on the stream's queue
  uint64_t value = 0;  // the semaphore value it signals
  int slot = -1;       // timestamp slot, -1 without timing
};

/// Where a stream under graph capture (torch.accelerator.Graph, graph.cpp) sends its work instead
/// of the card. Called with the command as it would have been submitted.
class CaptureSink {
 public:
  virtual ~CaptureSink() = default;
  /// A kernel launch. `args` (its argument block, already on the card) now belongs to the sink.
  virtual void launch(const LoadedProgram& program, uint64_t args, uint64_t args_bytes, uint64_t label,
                      const std::string& name) = 0;
  /// A device-to-device copy.
  virtual void copy(uint64_t dst, uint64_t src, uint64_t n) = 0;
};

class DeviceRuntime {
 public:
  /// The runtime of device `index`, opened on first use. Throws (IndexError-like) for a bad index.
  static DeviceRuntime& get(int index);
  /// Starts the driver (its connection to the cards) without opening a card: each card is opened
  /// at its first use, so a process takes only the cards it uses (a card of a server may be
  /// another process's). Raises what get() would for the driver: a forked child, no transport.
  static void start();
  /// Devices present; 0 when the transport is unavailable. Never throws.
  static int count() noexcept;
  /// Throws IndexError naming `index` unless a device with that index exists. Does not open it.
  static void check_index(int index);
  /// True once get(index) has opened the device.
  static bool opened(int index) noexcept;

  driver::Device& device() { return *device_; }
  int index() const { return index_; }

  // Streams. A stream is a hardware queue of its own; its id (0 .. queues - 1) numbers the streams,
  // not the hardware queues. Stream 0 is the default stream; the others come from two pools,
  // normal and high priority, handed out round robin.
  /// The calling thread's current stream on this device.
  int64_t current_stream() const;
  void set_current_stream(int64_t stream);
  /// A stream from the pool: high priority ones get the cores and DMA channels first.
  int64_t pool_stream(bool high_priority);
  bool is_high_priority(int64_t stream) const;
  /// Throws IndexError unless `stream` names a stream of this device.
  void check_stream(int64_t stream) const;
  /// True when everything queued on `stream` has finished. Never blocks.
  bool stream_query(int64_t stream);
  /// Waits for everything queued on `stream`; raises its device error, if any.
  void stream_synchronize(int64_t stream);

  // Events.
  /// Records `ev` on `stream` (re-recording moves it), with a timestamp if `timing`.
  void record_event(StreamEvent& ev, int64_t stream, bool timing);
  /// Makes `stream` wait on the card, not the host, until `ev` has happened.
  void wait_event(const StreamEvent& ev, int64_t stream);
  bool event_query(const StreamEvent& ev);
  void event_synchronize(const StreamEvent& ev);
  /// Device time from `a` to `b` in milliseconds; waits for both. Both need timing.
  double elapsed_ms(const StreamEvent& a, const StreamEvent& b);
  /// Gives back the event's timestamp slot (once the card has written it).
  void release_event(const StreamEvent& ev) noexcept;

  /// Device memory; alloc throws torch.OutOfMemoryError when it is exhausted.
  uint64_t alloc(uint64_t bytes);
  void free(uint64_t addr);

  /// Host -> device copy. From pageable memory it is staged and returns at once. From pinned memory
  /// (pin_host) of this device the card reads `src` itself: the call waits for that unless
  /// `non_blocking`, in which case `src` must stay as it is until the copy is synchronized.
  void h2d(uint64_t dst, const void* src, uint64_t n, bool non_blocking = false);
  /// Device -> host copy. Blocks until the data is in `dst`.
  void d2h(void* dst, uint64_t src, uint64_t n);
  /// Device -> device copy on this card. Asynchronous.
  void d2d(uint64_t dst, uint64_t src, uint64_t n);
  /// Copy from this card to address `dst` of card `peer`, by this card's DMA across PCIe (through
  /// the peer's memory window, not host memory). Waits for the peer's current stream first (its
  /// queued work may still use `dst`), and for the copy, so the peer's later work sees the data.
  void copy_to_peer(int peer, uint64_t dst, uint64_t src, uint64_t n);
  /// The same copy, only queued on this card's current stream: no wait on either side. The caller
  /// orders it with events (collectives do), and keeps both ranges alive until it has run.
  /// `label` names the copy in the device trace (a collective's step; "" for none).
  void copy_to_peer_async(int peer, uint64_t dst, uint64_t src, uint64_t n, const std::string& label = "");
  /// Where this card's DMA reaches address `addr` of card `peer` (its memory window, mapped once).
  uint64_t peer_iova(int peer, uint64_t addr);

  // Memory shared with other processes of the same cards (spyre-simd), for torch.distributed's
  // collectives on the cards (torch_spyre/_group_comm.py).
  /// A handle to this process's whole window of this card's memory, for the other processes
  /// (made once; shared until this process closes the card).
  uint64_t ipc_export();
  /// Maps another process's export (its handle, from another card) for this card's DMA, once.
  driver::Transport::IpcWindow ipc_open(uint64_t handle);
  /// Copies `n` bytes at `src` of this card to `iova`, inside a window ipc_open mapped, queued on
  /// the current stream with no wait (as copy_to_peer_async).
  void copy_to_iova_async(uint64_t iova, uint64_t src, uint64_t n, const std::string& label = "");
  /// Makes `stream` wait on the card, not the host, until the semaphore at `iova` (another card's,
  /// inside a window ipc_open mapped) is at least `value`.
  void wait_value(int64_t stream, uint64_t iova, uint64_t value);
  /// `stream`'s semaphore address and the last value queued to signal it: the next record_event
  /// on it signals that value + 1.
  std::pair<uint64_t, uint64_t> stream_signal_state(int64_t stream);

  /// Launches the program cached under `key` (compiled by `build` on first use) with `args`,
  /// labelled `op` in the trace (the ATen operator). Asynchronous.
  void launch(const std::string& key, const std::function<compiler::Program()>& build,
              const std::vector<uint64_t>& args, const std::string& op);

  /// Launches in order on the current stream, every program loaded before the first is queued (a
  /// compiled graph's sequence of programs). Asynchronous.
  struct LaunchRequest {
    std::string key;
    std::function<compiler::Program()> build;
    std::vector<uint64_t> args;
    std::string op;
  };
  void launch_sequence(const std::vector<LaunchRequest>& launches);

  /// One-launch capture (spyre/common/launch_file.h): the next launch of `op` (of any op when
  /// empty) runs alone, the card idle around it, and is written to `path` with the driver
  /// allocations its arguments point into, as they were before and after it.
  void capture_next_launch(const std::string& path, const std::string& op);
  /// Disarms the capture; returns whether a launch was captured since it was armed.
  bool end_launch_capture();

  /// Graph capture: until end_capture, kernels and device copies queued on `stream` go to `sink`
  /// instead of the card; host copies and synchronizing calls on it raise. One capture per stream.
  void begin_capture(int64_t stream, CaptureSink* sink);
  void end_capture(int64_t stream);
  bool capturing(int64_t stream);
  /// Device address of `stream`'s timeline semaphore (the stream is opened if need be).
  uint64_t stream_semaphore(int64_t stream);
  /// Submits captured descriptors (a graph's replay) on the calling thread's current stream;
  /// `names` label them for the profiler. Asynchronous.
  void submit(const std::vector<hw::Descriptor>& commands, const std::vector<std::string>& names);
  /// Sets the device sanitizer's checks of every queue of this runtime, now and as it opens more
  /// (each queue starts with an ENABLE of them, so a card shared with other clients checks only
  /// this process's launches). Returns once the card has them.
  void set_sanitize_checks(uint64_t bits);
  /// Queues a SANITIZE command on `stream` (sanitizer.h). While the stream captures a graph, an
  /// allocation is named at once, on an idle card, and a free not at all.
  void sanitize(int64_t stream, hw::SanitizeAction action, uint64_t base, uint64_t size, uint64_t tag);
  /// A copy of a loaded program in memory of its own (for a graph, which the cache's evictions must
  /// not touch); free() it when done. Waits for the copy.
  uint64_t copy_program(const LoadedProgram& program);
  /// Raises if the calling thread's current stream is capturing: `what` cannot be captured.
  void check_not_capturing(const char* what);

  /// Entries, bytes, hits, misses and evictions of the program cache.
  ProgramCacheStats program_cache_stats();
  /// The decoded listing of the program last launched for ATen op `op` (empty: of the last launch
  /// on this device), read back from device memory; a ValueError names the ops launched so far
  /// when there is none.
  std::string listing(const std::string& op);

  /// Where stream `stream` of this device has got to: a mark for stream_passed(). The caching
  /// allocator takes one when a block used on `stream` is freed, and reuses the block once passed.
  uint64_t stream_mark(int64_t stream);
  /// True once the card has finished all of `stream`'s work queued before `mark` was taken. Never
  /// blocks.
  bool stream_passed(int64_t stream, uint64_t mark);

  /// Waits for all work on every stream. A device error is raised here (and the queue is reset so
  /// the device stays usable).
  void synchronize();
  /// Waits for all work on every stream without raising or resetting anything, for cleanup before
  /// memory the card may still use is freed or unmapped. Errors stay for the user's next wait.
  void drain() noexcept;

  compiler::Target target() const { return compiler::Target(device_->info().card); }

  /// Held across a read-modify-write of device memory from the host (strided copies), so that
  /// two threads writing disjoint views of one storage do not undo each other's writes.
  std::mutex& host_rmw_mutex() { return rmw_mu_; }

 private:
  struct Stream {
    std::unique_ptr<driver::Queue> queue;
    CaptureSink* capture = nullptr;  // set while a graph captures this stream
    uint64_t semaphore = 0;          // device address of its u64 timeline semaphore
    uint64_t signalled = 0;          // the last value queued to signal it
  };
  DeviceRuntime(int index, driver::Device* device);
  /// The capture sink of the calling thread's current stream, or nullptr.
  CaptureSink* capture_sink();
  /// Queues a copy of `n` bytes on `q` as descriptors of at most hw::kMaxCopyBytes (`flags`: which
  /// side is a host IOVA), each noted for the profiler as `name`. Returns the last one's sequence.
  uint64_t copy_in_pieces(driver::Queue& q, uint64_t src, uint64_t dst, uint64_t n, uint8_t flags, const char* name,
                          uint64_t label = 0);
  /// h2d without the capture check: the runtime's own uploads run at once even during a capture.
  void upload(uint64_t dst, const void* src, uint64_t n, bool non_blocking = false);
  /// A staging buffer of at least `n` bytes: a kept one, or a new mapping.
  std::unique_ptr<driver::HostBuffer> take_staging(uint64_t n);
  /// The queue of `stream`, created on first use.
  driver::Queue& queue(int64_t stream);
  /// The queue of the calling thread's current stream.
  driver::Queue& queue() { return queue(current_stream()); }
  void wait(driver::Queue& q, uint64_t seq);
  /// What a failed command was, for its error: ", in <op> (kernel '<program>')" for a launch whose
  /// op or program is known, and for a fault at an instruction of a program still loaded, that
  /// instruction decoded; empty otherwise. Reads the card: call it once the queue is reset.
  std::string failed_launch(const hw::Descriptor& d, const hw::Completion& c);
  uint64_t label(const std::string& op);
  /// The device copy of a copy's trace label, for a command about to be queued on the current
  /// stream: written on that stream's queue without a wait (it lands before the command). Another
  /// queue that uses it waits for that write first, if it is still queued.
  uint64_t queued_label(const std::string& text);
  struct QueuedLabel {
    uint64_t addr;
    driver::Queue* queue;
    uint64_t seq;
  };
  std::mutex queued_labels_mu_;
  std::map<std::string, QueuedLabel> queued_labels_;
  /// launch() under the shared program lock; returns the programs the cache evicted in `evicted`.
  /// Returns the launch's sequence number on the current stream's queue (0: a capture took it).
  uint64_t submit_launch(const std::string& key, const std::function<compiler::Program()>& build,
                         const std::vector<uint64_t>& args, const std::string& op, std::vector<LoadedProgram>* evicted);
  /// The program cached under `key`, loaded (built and uploaded) on a miss; evictions are appended.
  LoadedProgram loaded(const std::string& key, const std::function<compiler::Program()>& build, size_t num_args,
                       std::vector<LoadedProgram>* evicted);
  /// Queues a LAUNCH of `prog` with `args` (carried in the queue's argument ring) on `q`, noted
  /// for the profiler; its sequence number.
  uint64_t queue_launch(driver::Queue& q, const LoadedProgram& prog, const std::vector<uint64_t>& args,
                        uint64_t op_label);
  /// alloc() for the runtime's own memory (programs, launch arguments, labels): when the device is
  /// full, asks the tensor allocator to give back what it caches, and tries once more.
  uint64_t alloc_reclaiming(uint64_t bytes);

  int index_;
  driver::Device* device_;
  std::atomic<uint64_t> sanitize_checks_;  // what each queue's first command sets (sanitizer.h)
  // Streams: the table below, under streams_mu_ (a stream's values reach the card in order).
  int num_streams_;
  int first_high_;  // streams [first_high_, num_streams_) are high priority
  std::mutex streams_mu_;
  std::vector<Stream> streams_;
  int next_normal_ = 0, next_high_ = 0;
  // The other parts, each with its own lock.
  TimestampSlots timestamps_;
  StagingPool staging_;
  ProgramCache programs_;
  std::shared_mutex programs_rw_;  // shared while a launch uses a program, exclusive to free evicted ones
  LabelTable labels_;
  // The program of each op's last launch, by op label address (0: the last launch of any op).
  std::mutex last_mu_;
  std::unordered_map<uint64_t, uint64_t> last_program_;
  // One-launch capture: armed by capture_next_launch, under capture_mu_.
  std::mutex capture_mu_;
  std::atomic<bool> capture_armed_{false};
  std::string capture_path_, capture_op_;
  bool captured_ = false;
  /// Runs `args`'s launch of `prog` on `q` alone and writes it to capture_path_; its sequence number.
  uint64_t capture_launch(driver::Queue& q, const LoadedProgram& prog, const std::vector<uint64_t>& args,
                          uint64_t op_label, const std::string& path);
  PeerWindows peers_;
  std::mutex ipc_mu_;
  uint64_t exported_ = 0;                                         // ipc_export's handle
  std::map<uint64_t, driver::Transport::IpcWindow> ipc_windows_;  // ipc_open's, by handle
  /// Throws ValueError unless [iova, iova + n) lies in a window ipc_open mapped.
  void check_ipc_range(uint64_t iova, uint64_t n, const char* what);
  std::mutex rmw_mu_;
  // Device printf (runtime_print.cpp): each queue's print buffer, once a program that prints runs.
  struct PrintBuffer {
    uint64_t addr = 0;
    bool registered = false;  // the card has it (a queue reset takes it off)
  };
  std::mutex print_mu_;
  std::unordered_map<driver::Queue*, PrintBuffer> print_buffers_;
  /// Gives queue `q` a print buffer, before its next launch, if it has none.
  void use_print_buffer(driver::Queue& q);
  /// After a reset of `q`: its print buffer is given again at its next printing launch.
  void forget_print_buffer(driver::Queue& q);
  /// Writes what `q`'s launches printed to stderr and empties its print buffer. Never throws.
  void flush_prints(driver::Queue& q) noexcept;
  void print_records(driver::Queue& q, const std::vector<uint8_t>& records);
  /// Copies `n` bytes between the host and device address `device` on `q` and waits, outside the
  /// profiler and the error handling of wait(); false if the card refused.
  bool move_bytes(driver::Queue& q, uint64_t device, void* host, uint64_t n, bool to_device);
};

/// Installs what the runtime calls when its own allocations find device `device` full: the tensor
/// allocator gives back the memory it caches. Called once by the tensor allocator.
void set_release_cached_memory(void (*fn)(int device));

/// Reallocates a spyre storage to `bytes`, keeping its contents up to the smaller size.
void resize_storage_bytes(const c10::Storage& storage, size_t bytes);

/// The calling thread's current device index (default 0).
int current_device();
void set_current_device(int index);

/// Calls per ATen operator that ran through the CPU fallback since the last reset.
std::map<std::string, uint64_t> fallback_counts(bool reset);

/// How ops without a Spyre kernel are handled.
enum class FallbackMode { kAllow, kWarn, kError };
FallbackMode fallback_mode();
/// TORCH_SPYRE_LAUNCH_BLOCKING=1: every launch is waited for where it is queued, so a device fault
/// raises at the op (and Python line) that launched the faulting kernel.
bool launch_blocking();
void set_fallback_mode(FallbackMode m);
/// Parses "allow" | "warn" | "error"; throws ValueError otherwise.
FallbackMode parse_fallback_mode(const std::string& s);

}  // namespace spyre::backend
