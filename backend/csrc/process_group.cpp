// The c10d backend "spyre": what torch.distributed runs for spyre tensors.
//
// How the bytes travel, in this version: each collective stages its spyre tensors in host memory,
// a host backend (Gloo, made by torch_spyre/distributed.py on the same store) carries them between
// the processes, and the results are copied back to the cards. The host tensors have the spyre
// tensors' sizes and strides, so Gloo accepts, refuses and computes exactly what it would for the
// same tensors on the CPU. CPU tensors handed to this backend go to Gloo as they are.
//
// An all-reduce whose ranks drive cards of one simulated server runs on the cards instead, by
// peer-to-peer DMA (torch_spyre/_group_comm.py, through the `on_cards` callable).
//
// Ordering, as NCCL's: the inputs are read when the collective is called (after everything queued
// before it on the caller's stream); the collective then runs on Gloo's threads, and an
// async_op's Work completes once the results are on the card, its future holding the output
// tensors. Its wait() returns when they are, so any stream may read them after it.
#include "process_group.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spyre::backend {

namespace {

using TensorList = std::vector<at::Tensor>;
using CopyBack = std::vector<std::pair<at::Tensor, at::Tensor>>;  // (spyre tensor, its host copy)

bool on_spyre(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// The host side of one collective's tensors, and which host tensors go back to which spyre ones.
class Staging {
 public:
  /// Host copies of `dev` with their values, written back to `dev` when the collective is done.
  TensorList inout(const TensorList& dev) { return stage(dev, true, true); }
  /// Host copies that only feed the collective.
  TensorList in(const TensorList& dev) { return stage(dev, true, false); }
  /// Host tensors the collective writes, copied to `dev` when it is done.
  TensorList out(const TensorList& dev) { return stage(dev, false, true); }
  std::vector<TensorList> in(const std::vector<TensorList>& dev) { return stage(dev, true, false); }
  std::vector<TensorList> out(const std::vector<TensorList>& dev) { return stage(dev, false, true); }
  CopyBack take() { return std::move(back_); }

 private:
  std::vector<TensorList> stage(const std::vector<TensorList>& dev, bool values, bool returns) {
    std::vector<TensorList> host;
    host.reserve(dev.size());
    for (const TensorList& l : dev) host.push_back(stage(l, values, returns));
    return host;
  }
  TensorList stage(const TensorList& dev, bool values, bool returns) {
    TensorList host;
    host.reserve(dev.size());
    for (const at::Tensor& t : dev) {
      if (!on_spyre(t)) {
        host.push_back(t);
        continue;
      }
      at::Tensor h = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
      if (values) h.copy_(t);  // waits for the work queued before it on the caller's stream
      if (returns) back_.emplace_back(t, h);
      host.push_back(std::move(h));
    }
    return host;
  }

  CopyBack back_;
};

// Writes the host results into their spyre tensors and waits until the cards hold them.
void copy_back(const CopyBack& back) {
  const at::NoGradGuard no_grad;  // a collective's output is written as data, as NCCL's is
  std::vector<c10::Device> devices;
  for (const auto& [dev, host] : back) {
    const c10::DeviceGuard guard(dev.device());
    dev.copy_(host);
    if (std::find(devices.begin(), devices.end(), dev.device()) == devices.end()) devices.push_back(dev.device());
  }
  for (const c10::Device& d : devices) c10::impl::getDeviceGuardImpl(d.type())->synchronizeDevice(d.index());
}

// A collective carried by the host backend, finished by copying its results to the cards. When
// the host work has a future (Gloo's collectives), the copy runs as soon as the bytes have arrived,
// on Gloo's thread; otherwise (Gloo's recv) in wait().
class StagedWork final : public c10d::Work {
 public:
  StagedWork(c10::intrusive_ptr<c10d::Work> host, CopyBack back, TensorList result, c10d::OpType type,
             const char* title)
      : c10d::Work(-1, type, title),
        host_(std::move(host)),
        result_(std::move(result)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
    c10::intrusive_ptr<c10::ivalue::Future> carried;
    try {
      carried = host_->getFuture();
    } catch (const c10::Error&) {
      carried = nullptr;
    }
    if (!carried) {
      lazy_ = true;
      back_ = std::move(back);
      return;
    }
    carried->addCallback([future = future_, back = std::move(back), result = result_](c10::ivalue::Future& f) {
      if (f.hasError()) {
        future->setError(f.exception_ptr());
        return;
      }
      finish(*future, back, result);
    });
  }

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->hasError() ? future_->exception_ptr() : std::exception_ptr();
  }
  std::vector<at::Tensor> result() override { return result_; }
  int sourceRank() const override { return host_->sourceRank(); }  // a receive's sender

  bool wait(std::chrono::milliseconds timeout) override {
    host_->wait(timeout);  // honours the timeout; raises what the host backend raised
    if (lazy_) {
      const std::lock_guard lock(mu_);
      if (!future_->completed()) finish(*future_, back_, result_);
    }
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return lazy_ ? c10d::Work::getFuture() : future_;  // a host work without a future: none either
  }

 private:
  static void finish(c10::ivalue::Future& future, const CopyBack& back, const TensorList& result) {
    try {
      copy_back(back);
      future.markCompleted(c10::IValue(result));
    } catch (...) {
      future.setError(std::current_exception());
    }
  }

  c10::intrusive_ptr<c10d::Work> host_;
  TensorList result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool lazy_ = false;
  CopyBack back_;  // lazy: what wait() copies back
  std::mutex mu_;
};

// A collective the cards run (torch_spyre/_group_comm.py): queued on the card's collective
// streams, and the caller's stream waits for it, as if it had run there. wait() makes the stream
// current then wait too (as NCCL's), and returns once the cards are done (as Gloo's: is_completed()
// is then true); the future holds the tensors at once, for work queued behind it on a stream.
class QueuedWork final : public c10d::Work {
 public:
  QueuedWork(TensorList result, c10d::OpType type, const char* title)
      : c10d::Work(-1, type, title),
        result_(std::move(result)),
        end_(c10::DeviceType::PrivateUse1),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
    const c10::Device device = result_.at(0).device();
    end_.record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
    future_->markCompleted(c10::IValue(result_));
  }
  bool isCompleted() override { return end_.query(); }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    const c10::Device device = result_.at(0).device();
    end_.block(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
    std::optional<pybind11::gil_scoped_release> no_gil;  // other threads' Python runs while the cards work
    if (PyGILState_Check()) no_gil.emplace();
    end_.synchronize();
    return true;
  }
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  TensorList result_;
  c10::Event end_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Works of a coalesced call made one call at a time: done when they all are.
class ListWork final : public c10d::Work {
 public:
  ListWork(std::vector<c10::intrusive_ptr<c10d::Work>> works, TensorList result, c10d::OpType type, const char* title)
      : c10d::Work(-1, type, title), works_(std::move(works)), result_(std::move(result)) {}
  bool isCompleted() override {
    return std::all_of(works_.begin(), works_.end(), [](const auto& w) { return w->isCompleted(); });
  }
  bool isSuccess() const override {
    return std::all_of(works_.begin(), works_.end(), [](const auto& w) { return w->isSuccess(); });
  }
  std::exception_ptr exception() const override {
    for (const auto& w : works_) {
      if (std::exception_ptr e = w->exception()) return e;
    }
    return nullptr;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (const auto& w : works_) w->wait(timeout);
    return true;
  }
  std::vector<at::Tensor> result() override { return result_; }
  // Completed with the outputs once every call's future is.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures(c10::FutureType::create(c10::AnyType::get()));
    for (const auto& w : works_) futures.push_back(w->getFuture());
    return c10::collectAll(futures)->then([result = result_](c10::ivalue::Future&) { return c10::IValue(result); },
                                          c10::ListType::create(c10::TensorType::get()));
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  TensorList result_;
};

// The op as torch_spyre.comm names it; "" for one the cards do not reduce.
const char* op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return "sum";
    case c10d::ReduceOp::AVG:
      return "avg";
    case c10d::ReduceOp::PRODUCT:
      return "product";
    case c10d::ReduceOp::MAX:
      return "max";
    case c10d::ReduceOp::MIN:
      return "min";
    default:
      return "";
  }
}

// A Python callable held by C++ whose last owner may be any thread: released under the GIL.
using PyCallable = std::shared_ptr<pybind11::object>;
PyCallable hold(pybind11::object fn) {
  if (fn.is_none()) return nullptr;
  return PyCallable(new pybind11::object(std::move(fn)), [](pybind11::object* o) {
    if (Py_IsInitialized()) {
      const pybind11::gil_scoped_acquire gil;
      delete o;
    } else {
      (void)o->release();  // the interpreter is gone: nothing to give back to
      delete o;
    }
  });
}

class SpyreBackend final : public c10d::Backend {
 public:
  SpyreBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> host, PyCallable on_cards, PyCallable ready)
      : c10d::Backend(rank, size), host_(std::move(host)), on_cards_(std::move(on_cards)), ready_(std::move(ready)) {
    TORCH_CHECK(host_, "spyre: the spyre process group needs a host backend");
  }

  const std::string getBackendName() const override { return "spyre"; }

  c10::intrusive_ptr<c10d::Work> broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) override {
    if (tensors.size() == 1 && opts.rootTensor == 0) {
      if (auto w =
              on_cards("broadcast", tensors, tensors, "", opts.rootRank, c10d::OpType::BROADCAST, "spyre:broadcast"))
        return w;
    }
    Staging s;
    TensorList host = s.inout(tensors);
    return done(host_->broadcast(host, opts), s, tensors, c10d::OpType::BROADCAST, "spyre:broadcast");
  }

  c10::intrusive_ptr<c10d::Work> allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) override {
    if (tensors.size() == 1) {
      if (auto w = on_cards("all_reduce", tensors, tensors, op_name(opts.reduceOp), 0, c10d::OpType::ALLREDUCE,
                            "spyre:all_reduce"))
        return w;
    }
    Staging s;
    TensorList host = s.inout(tensors);
    return done(host_->allreduce(host, opts), s, tensors, c10d::OpType::ALLREDUCE, "spyre:all_reduce");
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(TensorList& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    c10d::AllreduceOptions one;
    one.reduceOp = opts.reduceOp;
    one.timeout = opts.timeout;
    if (auto w = one_by_one(
            tensors, tensors, tensors.size(),
            [&](size_t i) {
              TensorList t{tensors[i]};
              return allreduce(t, one);
            },
            c10d::OpType::ALLREDUCE_COALESCED, "spyre:all_reduce_coalesced"))
      return w;
    Staging s;
    TensorList host = s.inout(tensors);
    return done(host_->allreduce_coalesced(host, opts), s, tensors, c10d::OpType::ALLREDUCE_COALESCED,
                "spyre:all_reduce_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> reduce(TensorList& tensors, const c10d::ReduceOptions& opts) override {
    if (tensors.size() == 1 && opts.rootTensor == 0) {
      if (auto w = on_cards("reduce", tensors, tensors, op_name(opts.reduceOp), opts.rootRank, c10d::OpType::REDUCE,
                            "spyre:reduce"))
        return w;
    }
    Staging s;
    TensorList host = s.inout(tensors);
    return done(host_->reduce(host, opts), s, tensors, c10d::OpType::REDUCE, "spyre:reduce");
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<TensorList>& outputs, TensorList& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    if (outputs.size() == 1 && inputs.size() == 1) {
      if (auto w = on_cards("all_gather_list", join(outputs[0], inputs), outputs[0], "", 0, c10d::OpType::ALLGATHER,
                            "spyre:all_gather"))
        return w;
    }
    Staging s;
    std::vector<TensorList> host_out = s.out(outputs);
    TensorList host_in = s.in(inputs);
    return done(host_->allgather(host_out, host_in, opts), s, flat(outputs), c10d::OpType::ALLGATHER,
                "spyre:all_gather");
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    if (auto w = on_cards("all_gather", {output, input}, {output}, "", 0, c10d::OpType::_ALLGATHER_BASE,
                          "spyre:_all_gather_base"))
      return w;
    Staging s;
    at::Tensor host_out = s.out({output})[0];
    at::Tensor host_in = s.in({input})[0];
    return done(host_->_allgather_base(host_out, host_in, opts), s, {output}, c10d::OpType::_ALLGATHER_BASE,
                "spyre:_all_gather_base");
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    if (auto w = one_by_one(
            join(outputs, inputs), outputs, outputs.size() == inputs.size() ? outputs.size() : 0,
            [&](size_t i) { return _allgather_base(outputs[i], inputs[i], opts); }, c10d::OpType::COALESCED,
            "spyre:all_gather_into_tensor_coalesced"))
      return w;
    Staging s;
    TensorList host_out = s.out(outputs);
    TensorList host_in = s.in(inputs);
    return done(host_->allgather_into_tensor_coalesced(host_out, host_in, opts), s, outputs, c10d::OpType::COALESCED,
                "spyre:all_gather_into_tensor_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<TensorList>& outputs, TensorList& inputs,
                                        const c10d::GatherOptions& opts) override {
    if (outputs.size() <= 1 && inputs.size() == 1) {
      const TensorList gathered = outputs.empty() ? TensorList{} : outputs[0];
      if (auto w = on_cards("gather", join(gathered, inputs), gathered.empty() ? inputs : gathered, "", opts.rootRank,
                            c10d::OpType::GATHER, "spyre:gather"))
        return w;
    }
    Staging s;
    std::vector<TensorList> host_out = s.out(outputs);
    TensorList host_in = s.in(inputs);
    return done(host_->gather(host_out, host_in, opts), s, flat(outputs), c10d::OpType::GATHER, "spyre:gather");
  }

  c10::intrusive_ptr<c10d::Work> scatter(TensorList& outputs, std::vector<TensorList>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    if (outputs.size() == 1 && inputs.size() <= 1) {
      const TensorList parts = inputs.empty() ? TensorList{} : inputs[0];
      if (auto w = on_cards("scatter", join(outputs, parts), outputs, "", opts.rootRank, c10d::OpType::SCATTER,
                            "spyre:scatter"))
        return w;
    }
    Staging s;
    TensorList host_out = s.out(outputs);
    std::vector<TensorList> host_in = s.in(inputs);
    return done(host_->scatter(host_out, host_in, opts), s, outputs, c10d::OpType::SCATTER, "spyre:scatter");
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(TensorList& outputs, std::vector<TensorList>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    if (outputs.size() == 1 && inputs.size() == 1) {
      if (auto w = on_cards("reduce_scatter_list", join(outputs, inputs[0]), outputs, op_name(opts.reduceOp), 0,
                            c10d::OpType::REDUCE_SCATTER, "spyre:reduce_scatter"))
        return w;
    }
    Staging s;
    TensorList host_out = s.out(outputs);
    std::vector<TensorList> host_in = s.in(inputs);
    return done(host_->reduce_scatter(host_out, host_in, opts), s, outputs, c10d::OpType::REDUCE_SCATTER,
                "spyre:reduce_scatter");
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    const char* op = op_name(opts.reduceOp);
    if (auto w = on_cards("reduce_scatter", {output, input}, {output}, op, 0, c10d::OpType::_REDUCE_SCATTER_BASE,
                          "spyre:_reduce_scatter_base"))
      return w;
    Staging s;
    at::Tensor host_out = s.out({output})[0];
    at::Tensor host_in = s.in({input})[0];
    return done(host_->_reduce_scatter_base(host_out, host_in, opts), s, {output}, c10d::OpType::_REDUCE_SCATTER_BASE,
                "spyre:_reduce_scatter_base");
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    if (auto w = one_by_one(
            join(outputs, inputs), outputs, outputs.size() == inputs.size() ? outputs.size() : 0,
            [&](size_t i) { return _reduce_scatter_base(outputs[i], inputs[i], opts); }, c10d::OpType::COALESCED,
            "spyre:reduce_scatter_tensor_coalesced"))
      return w;
    Staging s;
    TensorList host_out = s.out(outputs);
    TensorList host_in = s.in(inputs);
    return done(host_->reduce_scatter_tensor_coalesced(host_out, host_in, opts), s, outputs, c10d::OpType::COALESCED,
                "spyre:reduce_scatter_tensor_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    if (auto w = on_cards("all_to_all_single", {output, input}, {output}, "", 0, c10d::OpType::ALLTOALL_BASE,
                          "spyre:all_to_all_single", {output_splits, input_splits}))
      return w;
    Staging s;
    at::Tensor host_out = s.out({output})[0];
    at::Tensor host_in = s.in({input})[0];
    return done(host_->alltoall_base(host_out, host_in, output_splits, input_splits, opts), s, {output},
                c10d::OpType::ALLTOALL_BASE, "spyre:all_to_all_single");
  }

  c10::intrusive_ptr<c10d::Work> alltoall(TensorList& outputs, TensorList& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    if (auto w =
            on_cards("all_to_all", join(outputs, inputs), outputs, "", 0, c10d::OpType::ALLTOALL, "spyre:all_to_all"))
      return w;
    Staging s;
    TensorList host_out = s.out(outputs);
    TensorList host_in = s.in(inputs);
    return done(host_->alltoall(host_out, host_in, opts), s, outputs, c10d::OpType::ALLTOALL, "spyre:all_to_all");
  }

  c10::intrusive_ptr<c10d::Work> send(TensorList& tensors, int dst, int tag) override {
    Staging s;
    TensorList host = s.in(tensors);
    return done(host_->send(host, dst, tag), s, {}, c10d::OpType::SEND, "spyre:send");
  }

  c10::intrusive_ptr<c10d::Work> recv(TensorList& tensors, int src, int tag) override {
    Staging s;
    TensorList host = s.out(tensors);
    return done(host_->recv(host, src, tag), s, tensors, c10d::OpType::RECV, "spyre:recv");
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(TensorList& tensors, int tag) override {
    Staging s;
    TensorList host = s.out(tensors);
    return done(host_->recvAnysource(host, tag), s, tensors, c10d::OpType::RECVANYSOURCE, "spyre:recv_any_source");
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override { return host_->barrier(opts); }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }

 private:
  static TensorList flat(const std::vector<TensorList>& lists) {
    TensorList out;
    for (const TensorList& l : lists) out.insert(out.end(), l.begin(), l.end());
    return out;
  }

  static TensorList join(const TensorList& a, const TensorList& b) {
    TensorList out(a);
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }

  // The cards run the collective `kind` of `tensors` (laid out as torch_spyre/_group_comm.py's
  // Group.run says) when every rank's call can (it decides, the same on every rank): its Work,
  // whose result is `result`; else null, for the host.
  c10::intrusive_ptr<c10d::Work> on_cards(const char* kind, const TensorList& tensors, const TensorList& result,
                                          const char* op, int64_t root, c10d::OpType type, const char* title,
                                          const std::vector<std::vector<int64_t>>& splits = {{}, {}}) {
    if (!on_cards_ || tensors.empty() || result.empty()) return nullptr;
    bool queued = false;
    {
      const pybind11::gil_scoped_acquire gil;
      queued = (*on_cards_)(kind, tensors, op, root, splits).cast<bool>();
    }
    if (!queued) return nullptr;
    return c10::make_intrusive<QueuedWork>(result, type, title);
  }

  // A coalesced call made as its calls one by one, each on the cards when they take it, when the
  // group's cards are set up (every rank knows alike) and every tensor is a spyre tensor of one
  // dtype; null otherwise, for the host backend's coalesced call (which refuses what Gloo refuses,
  // and adds in its own order).
  template <typename One>
  c10::intrusive_ptr<c10d::Work> one_by_one(const TensorList& tensors, const TensorList& result, size_t n, One one,
                                            c10d::OpType type, const char* title) {
    if (!ready_ || n == 0 || !std::all_of(tensors.begin(), tensors.end(), on_spyre) ||
        std::any_of(tensors.begin(), tensors.end(),
                    [&](const at::Tensor& t) { return t.scalar_type() != tensors[0].scalar_type(); })) {
      return nullptr;
    }
    {
      const pybind11::gil_scoped_acquire gil;
      if (!(*ready_)().cast<bool>()) return nullptr;
    }
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (size_t i = 0; i < n; ++i) works.push_back(one(i));
    return c10::make_intrusive<ListWork>(std::move(works), result, type, title);
  }

  // The Work of a collective whose host side `host` runs: the host work itself when nothing was
  // staged (CPU tensors only), else one that copies the results back.
  static c10::intrusive_ptr<c10d::Work> done(c10::intrusive_ptr<c10d::Work> host, Staging& s, TensorList result,
                                             c10d::OpType type, const char* title) {
    CopyBack back = s.take();
    if (back.empty() && std::none_of(result.begin(), result.end(), on_spyre)) return host;
    return c10::make_intrusive<StagedWork>(std::move(host), std::move(back), std::move(result), type, title);
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  PyCallable on_cards_;  // (kind, tensors, op, root, splits) -> whether the cards took the collective; null: never
  PyCallable ready_;     // () -> whether the group's cards are set up for collectives
};

// DistributedDataParallel's time stats for spyre modules: host times, as its CPU timer's.
class HostTimer final : public c10d::Timer {
 public:
  explicit HostTimer(c10::Device /*device*/) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const std::optional<int64_t> a = getTimestamp(start), b = getTimestamp(end);
    if (!a || !b || *b < *a) return std::nullopt;
    return *b - *a;
  }
};

}  // namespace

void bind_process_group(pybind11::module_& m) {
  m.def(
      "_process_group",
      [](int rank, int size, c10::intrusive_ptr<c10d::Backend> host, pybind11::object on_cards,
         pybind11::object ready) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<SpyreBackend>(rank, size, std::move(host), hold(std::move(on_cards)),
                                                 hold(std::move(ready)));
      },
      pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("host"), pybind11::arg("on_cards") = pybind11::none(),
      pybind11::arg("ready") = pybind11::none(),
      "The c10d backend for spyre tensors, carrying their bytes through `host` (a Gloo backend); "
      "`on_cards(kind, tensors, op, root, splits)` runs the collective on the cards when it returns True, and a "
      "coalesced call is made one call at a time when `ready()`.");
}

}  // namespace spyre::backend

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, spyre::backend::HostTimer);
}  // namespace c10d
