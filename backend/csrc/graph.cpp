// torch.accelerator.Graph for spyre. Capture records the kernels and device copies queued on the
// current stream as the descriptors they would have been (they do not run); replay submits those
// descriptors again on the then current stream, with no compiling, argument packing or uploads.
// The argument blocks and a private copy of each program stay on the card for the graph's life,
// and tensors allocated during capture come from the graph's memory pool, so their addresses stay
// valid for replays.
#include "graph.h"

#include <ATen/core/GraphImplInterface.h>
#include <c10/util/Exception.h>

#include <fstream>
#include <string>
#include <vector>

#include "device_allocator.h"
#include "runtime.h"

namespace spyre::backend {
namespace {

class SpyreGraph final : public at::GraphImplInterface, private CaptureSink {
 public:
  explicit SpyreGraph(const at::GraphImplArgs& /*args*/) {}
  ~SpyreGraph() override {
    try {
      reset();
    } catch (const std::exception& e) {
      TORCH_WARN("spyre: destroying a graph: ", e.what());
    }
  }

  void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode /*mode*/) override {
    TORCH_CHECK(!capturing_ && commands_.empty(), "spyre: this graph is captured already; reset() it first");
    device_ = current_device();
    DeviceRuntime& rt = DeviceRuntime::get(device_);
    stream_ = rt.current_stream();
    const uint64_t given = pool.first != 0 ? pool.first : pool.second;
    own_pool_ = given == 0;
    pool_ = own_pool_ ? create_mem_pool(device_) : given;
    begin_mem_pool(pool_);
    try {
      rt.begin_capture(stream_, this);
    } catch (...) {
      end_mem_pool(pool_);
      throw;
    }
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "spyre: capture_end without capture_begin");
    capturing_ = false;
    // The stream stops sending work here first, whatever happens to the pool after.
    DeviceRuntime::get(device_).end_capture(stream_);
    end_mem_pool(pool_);
  }

  void instantiate() override {
    TORCH_CHECK(!capturing_ && !commands_.empty(), "spyre: instantiate needs a captured graph");
  }

  void replay() override {
    TORCH_CHECK(!capturing_, "spyre: replay during capture");
    TORCH_CHECK(device_ >= 0, "spyre: replay needs a captured graph");
    DeviceRuntime::get(device_).submit(commands_, names_);
  }

  void reset() override {
    if (capturing_) capture_end();
    if (device_ < 0) return;
    DeviceRuntime& rt = DeviceRuntime::get(device_);
    rt.drain();  // a replay may still use the programs, arguments and pool memory
    for (const uint64_t addr : owned_) rt.free(addr);
    owned_.clear();
    commands_.clear();
    names_.clear();
    if (own_pool_) release_mem_pool(pool_);
    own_pool_ = false;
    pool_ = 0;
    device_ = -1;
  }

  at::MempoolId_t pool() const override { return {0, static_cast<c10::CaptureId_t>(pool_)}; }

  void enable_debug_mode() override {}

  void debug_dump(const std::string& path) override {
    std::ofstream out(path);
    TORCH_CHECK(out, "spyre: cannot write the graph dump to '", path, "'");
    out << "spyre graph: device " << device_ << ", captured on stream " << stream_ << ", " << commands_.size()
        << " commands\n";
    for (size_t i = 0; i < commands_.size(); ++i) {
      const hw::Descriptor& d = commands_[i];
      out << i << ": " << hw::opcode_name(d.opcode) << " " << names_[i];
      if (d.opcode == hw::Opcode::kLaunch) {
        out << " program=0x" << std::hex << d.launch.program << " args=0x" << d.launch.args << " cores=0x"
            << d.launch.core_mask << std::dec;
      } else {
        out << " src=0x" << std::hex << d.copy.src << " dst=0x" << d.copy.dst << std::dec << " bytes=" << d.copy.size;
      }
      out << "\n";
    }
  }

 private:
  // CaptureSink
  void launch(const LoadedProgram& program, uint64_t args, uint64_t args_bytes, uint64_t label,
              const std::string& name) override {
    owned_.push_back(args);
    // The program cache may evict the program while the graph lives: keep a copy of our own.
    const uint64_t mine = DeviceRuntime::get(device_).copy_program(program);
    owned_.push_back(mine);
    hw::Descriptor d{};
    d.opcode = hw::Opcode::kLaunch;
    d.launch = {mine, program.size, args, args_bytes, program.core_mask, label};
    commands_.push_back(d);
    names_.push_back(name);
  }

  void copy(uint64_t dst, uint64_t src, uint64_t n) override {
    for (uint64_t off = 0; off < n; off += hw::kMaxCopyBytes) {
      hw::Descriptor d{};
      d.opcode = hw::Opcode::kCopy;
      d.copy.src = src + off;
      d.copy.dst = dst + off;
      d.copy.size = std::min(hw::kMaxCopyBytes, n - off);
      commands_.push_back(d);
      names_.push_back("Memcpy DtoD");
    }
  }

  int device_ = -1;
  int64_t stream_ = 0;
  bool capturing_ = false;
  bool own_pool_ = false;
  uint64_t pool_ = 0;
  std::vector<hw::Descriptor> commands_;
  std::vector<std::string> names_;
  std::vector<uint64_t> owned_;  // device memory the graph frees on reset
};

}  // namespace

void register_graph_impl() {
  // The registry's key is the device type's name, which is "SPYRE" only once torch_spyre has
  // renamed PrivateUse1: so this runs from Python after the rename, and once.
  const std::string key = c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false);
  if (at::GraphImplRegistry()->Has(key)) return;
  at::GraphImplRegistry()->Register(key, [](const at::GraphImplArgs& args) -> std::unique_ptr<at::GraphImplInterface> {
    return std::make_unique<SpyreGraph>(args);
  });
}

}  // namespace spyre::backend
