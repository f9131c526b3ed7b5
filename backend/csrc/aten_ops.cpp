// ATen registrations of the Spyre device that are not compute: tensor creation, views, resizing,
// copies between host and device (with dtype and stride conversion), .item(), and the CPU
// fallback for every operator without a Spyre kernel. Compute kernels live in their own files
// (pointwise_ops.cpp, reduce_ops.cpp, matmul.cpp).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "aten_util.h"
#include "compute.h"
#include "pointwise_common.h"
#include "runtime.h"
#include "spyre/hw/dlfloat16.h"

namespace spyre::backend {
namespace {

// fp16 data of a card that keeps fp16 as DLFloat16 (the silicon's choice; the config's
// chip.fp16_format) crosses the copy boundary converted, in place in a host buffer.
bool dlfloat(const at::Tensor& device_tensor) {
  return device_tensor.scalar_type() == at::kHalf &&
         DeviceRuntime::get(device_tensor.device().index()).device().info().fp16_dlfloat;
}

void ieee_to_dlfloat(void* data, uint64_t bytes) {
  auto* p = static_cast<uint16_t*>(data);
  for (uint64_t i = 0; i < bytes / 2; ++i) {
    p[i] = hw::dlf16_from_float(static_cast<float>(c10::Half(p[i], c10::Half::from_bits())));
  }
}

void dlfloat_to_ieee(void* data, uint64_t bytes) {
  auto* p = static_cast<uint16_t*>(data);
  for (uint64_t i = 0; i < bytes / 2; ++i) p[i] = c10::Half(hw::dlf16_to_float(p[i])).x;
}

c10::Device target_device(const std::optional<c10::Device>& device) {
  c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1, -1));
  if (d.index() < 0) d = c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(current_device()));
  TORCH_CHECK(d.is_privateuseone(), "spyre: expected a spyre device, got ", d);
  DeviceRuntime::get(d.index());  // a clear error for an index that does not exist
  return d;
}

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "spyre: only strided tensors are supported, not ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "spyre: pin_memory applies to CPU tensors only");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  const c10::Device d = target_device(device);
  const c10::DeviceGuard guard(d);
  return at::detail::empty_generic(size, c10::GetAllocator(c10::DeviceType::PrivateUse1),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  const c10::Device d = target_device(device);
  const c10::DeviceGuard guard(d);
  return at::detail::empty_strided_generic(size, stride, c10::GetAllocator(c10::DeviceType::PrivateUse1),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// As on CPU: a resize to the current sizes keeps the strides (a strided view stays strided, so a
// result copied back into it lands in the right places); a new size makes the tensor contiguous.
// The storage grows before any metadata changes, so a failed resize leaves the tensor as it was.
const at::Tensor& resize_in_place(const at::Tensor& self, c10::IntArrayRef size,
                                  std::optional<c10::MemoryFormat> memory_format) {
  for (const int64_t s : size) TORCH_CHECK(s >= 0, "spyre: resize_: negative size ", s, " in ", size);
  TORCH_CHECK(memory_format != c10::MemoryFormat::Preserve, "spyre: resize_: unsupported memory format Preserve");
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != size) {
    uint64_t numel = 1, needed = 0;
    for (const int64_t s : size) {
      TORCH_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(s), &numel), "spyre: resize_: ", size,
                  " has too many elements");
    }
    TORCH_CHECK(
        !__builtin_mul_overflow(static_cast<uint64_t>(impl->storage_offset()) + numel, self.itemsize(), &needed),
        "spyre: resize_: ", size, " needs more bytes than can be addressed");
    if (numel > 0 && needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
    impl->set_sizes_contiguous(size);
  }
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  return self;
}

// Same shape and dtype, both contiguous: a copy between them is one flat run of bytes.
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous();
}

// Device metadata (torch._C._set_tensor_metadata) describes a tensor's data: views of it and copies
// made on the device get it too, unless they have their own.
const at::Tensor& carry_backend_meta(const at::Tensor& from, const at::Tensor& to) {
  c10::TensorImpl* src = from.unsafeGetTensorImpl();
  c10::TensorImpl* dst = to.unsafeGetTensorImpl();
  if (src != dst && src->get_backend_meta() && !dst->get_backend_meta()) {
    const auto meta = src->get_backend_meta_intrusive_ptr();
    dst->set_backend_meta(meta->clone(meta));
  }
  return to;
}

// Copies between host and device move bytes in the source's dtype; conversions, broadcasts and
// strided layouts are done by a copy kernel on the device (compute.cpp), as on silicon. Only dtypes
// the device does not compute in (double, complex, ...) are converted on the host.
at::Tensor copy_between(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  // torch's broadcasting rule for copy_ (CPU's own copy checks it, a zero-size destination too).
  for (int64_t i = 1; i <= std::min(src.dim(), dst.dim()); ++i) {
    const int64_t s = src.size(-i), d = dst.size(-i);
    TORCH_CHECK(s == d || s == 1, "The size of tensor a (", d, ") must match the size of tensor b (", s,
                ") at non-singleton dimension ", dst.dim() - i);
  }
  if (src.dim() > dst.dim()) {  // broadcasting gives more dims than dst has, even with one element
    TORCH_CHECK(false, "output with shape ", dst.sizes(), " doesn't match the broadcast shape ",
                at::infer_size(dst.sizes(), src.sizes()));
  }
  if (dst.numel() == 0) return dst;
  const bool device_types = device_dtype(src.scalar_type()) && device_dtype(dst.scalar_type());
  if (src.is_cpu() && dst.is_privateuseone()) {
    if (!device_types) {
      write_device(dst, src);
    } else if (same_dense_layout(src, dst)) {
      write_device(dst, src, non_blocking);  // one DMA
    } else {
      const c10::DeviceGuard guard(dst.device());
      const at::Tensor staged = at::empty(src.sizes(), dst.options().dtype(src.scalar_type()));
      write_device(staged, src);
      device_copy(dst, staged);
    }
  } else if (src.is_privateuseone() && dst.is_cpu()) {
    if (same_dense_layout(src, dst)) {
      DeviceRuntime::get(src.device().index()).d2h(dst.data_ptr(), device_addr(src), dst.nbytes());
      if (dlfloat(src)) dlfloat_to_ieee(dst.data_ptr(), dst.nbytes());
    } else if (device_types && (!src.is_contiguous() || src.dtype() != dst.dtype())) {
      const c10::DeviceGuard guard(src.device());
      const at::Tensor packed = at::empty(src.sizes(), src.options().dtype(dst.scalar_type()));
      device_copy(packed, src);
      dst.copy_(read_device(packed));
    } else {
      dst.copy_(read_device(src));
    }
  } else {
    TORCH_CHECK(src.is_privateuseone() && dst.is_privateuseone(), "spyre: _copy_from between ", src.device(), " and ",
                dst.device(), " is not supported");
    if (!device_types) {
      write_device(dst, read_device(src));  // a dtype the device does not compute in: via the host
      return dst;
    }
    if (src.device() != dst.device()) {  // card to card by DMA, dense bytes in the destination dtype
      const at::Tensor whole = src.sizes() == dst.sizes() ? src : src.expand(dst.sizes());  // broadcast
      at::Tensor packed = whole;
      if (!whole.is_contiguous() || whole.dtype() != dst.dtype()) {
        const c10::DeviceGuard guard(src.device());
        packed = at::empty(dst.sizes(), src.options().dtype(dst.scalar_type()));
        device_copy(packed, whole);
      }
      at::Tensor landing = dst;
      if (!same_dense_layout(packed, dst)) {
        const c10::DeviceGuard guard(dst.device());
        landing = at::empty(dst.sizes(), dst.options());
      }
      const c10::DeviceGuard guard(src.device());
      DeviceRuntime::get(src.device().index())
          .copy_to_peer(dst.device().index(), device_addr(landing), device_addr(packed), landing.nbytes());
      if (!landing.is_same(dst)) {
        const c10::DeviceGuard dst_guard(dst.device());
        device_copy(dst, landing);
      }
      return dst;
    }
    const c10::DeviceGuard guard(dst.device());
    if (src.is_same(dst) || (device_addr(src) == device_addr(dst) && src.strides() == dst.strides() &&
                             src.sizes() == dst.sizes() && src.dtype() == dst.dtype())) {
      return dst;  // the same elements
    }
    // The storage ranges the two cover: disjoint ranges cannot overlap, whatever the strides.
    const auto [src_at, src_bytes] = device_span(src);
    const auto [dst_at, dst_bytes] = device_span(dst);
    const bool disjoint = src_at + src_bytes <= dst_at || dst_at + dst_bytes <= src_at;
    if (disjoint && same_dense_layout(src, dst)) {
      DeviceRuntime::get(dst.device().index()).d2d(device_addr(dst), device_addr(src), dst.nbytes());
    } else if (disjoint) {
      device_copy(dst, src);
    } else {  // read all of the source before writing any of the destination
      device_copy(dst, src.clone(at::MemoryFormat::Contiguous));
    }
  }
  return dst;
}

// A view of `t` with its conjugate and negative bits cleared: the values as stored.
at::Tensor stored(const at::Tensor& t) {
  at::Tensor p = t;
  if (p.is_conj()) p = at::_conj(p);
  if (p.is_neg()) p = at::_neg_view(p);
  return p;
}

// The last storage element a view reaches (torch's strides are never negative).
int64_t last_element(const at::Tensor& t) {
  int64_t at = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) at += t.stride(d) * (t.size(d) - 1);
  return at;
}

// A device tensor on the host with its own strides: the storage it spans is read, and viewed there
// as the device views it.
at::Tensor host_with_strides(const at::Tensor& t) {
  if (!t.is_privateuseone()) return t;
  const at::Tensor span = t.as_strided({last_element(t) - t.storage_offset() + 1}, {1}, t.storage_offset());
  return span.cpu().as_strided(t.sizes(), t.strides(), 0);
}

// A copy into a view whose elements share memory (overlapping unfold windows): CPU writes each shared
// location more than once, the last write in its loop order winning, and that order follows the sizes
// and strides of both tensors. Such a copy runs as CPU's own copy_: the storage the destination spans
// (and the source's, when it shares it) goes to the host, the copy runs on views with the same
// strides there, and the span is written back. Internal copies of torch's linear algebra take this
// path too, so it cannot be refused.
void copy_in_cpu_order(const at::Tensor& src, const at::Tensor& dst) {
  const bool shared = src.is_privateuseone() && src.device() == dst.device() && src.numel() > 0 &&
                      src.storage().is_alias_of(dst.storage());
  TORCH_CHECK(!shared || src.element_size() == dst.element_size(),
              "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
              "memory location. Please clone() the tensor before performing the operation.");
  int64_t first = dst.storage_offset(), last = last_element(dst);
  if (shared) {
    first = std::min(first, src.storage_offset());
    last = std::max(last, last_element(src));
  }
  const at::Tensor span = dst.as_strided({last - first + 1}, {1}, first);
  const at::Tensor host = span.cpu();
  const at::Tensor host_src =
      shared ? host.view(src.scalar_type()).as_strided(src.sizes(), src.strides(), src.storage_offset() - first)
             : host_with_strides(src);
  host.as_strided(dst.sizes(), dst.strides(), dst.storage_offset() - first).copy_(host_src);
  span.copy_(host);
}

// The values of src into dst, in CPU's order where dst's elements share memory.
void copy_values(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (dst.is_privateuseone() && has_hidden_internal_overlap(dst)) {
    copy_in_cpu_order(src, dst);
  } else {
    copy_between(src, dst, non_blocking);
  }
}

at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  // What torch's copy_ does after this hook, for the devices it copies itself: nothing when dst
  // and src are the same view, else its iterator's overlap checks. A source with an expanded dim
  // (setitem's broadcast value) is one whose overlap torch cannot tell, and lets through.
  const bool same_view = dst.is_alias_of(src) && dst.storage_offset() == src.storage_offset() &&
                         dst.strides() == src.strides() && dst.sizes() == src.sizes() &&
                         dst.scalar_type() == src.scalar_type() && dst.is_conj() == src.is_conj() &&
                         dst.is_neg() == src.is_neg();
  if (same_view) return dst;
  at::assert_no_internal_overlap(dst);
  const bool expanded = std::find(src.strides().begin(), src.strides().end(), 0) != src.strides().end();
  if (src.device() == dst.device() && !expanded) at::assert_no_partial_overlap(dst, src);
  if (src.is_conj() || src.is_neg() || dst.is_conj() || dst.is_neg()) {
    // The math bits (torch's lazy conj() and negation): the stored values move, then the
    // destination takes the difference of the bits, as torch's own copy kernels do.
    const at::Tensor d = stored(dst);
    copy_values(stored(src), d, false);
    if (src.is_conj() != dst.is_conj()) d.conj_physical_();
    if (src.is_neg() != dst.is_neg()) d.neg_();
    return dst;
  }
  copy_values(src, dst, non_blocking);
  if (src.is_privateuseone() && dst.is_privateuseone()) carry_backend_meta(src, dst);  // clone() and to()
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  resize_in_place(dst, src.sizes(), std::nullopt);
  return copy_from(src, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "spyre: a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  return at::_local_scalar_dense(read_device(self));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return carry_backend_meta(self, at::native::as_strided_tensorimpl(self, size, stride, storage_offset));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return carry_backend_meta(self, at::native::view(self, C10_AS_INTARRAYREF_SLOW(size)));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return carry_backend_meta(
      self, at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride)));
}

// set_(storage, offset, size, stride): torch's checks, then, as on CPU, a storage too small for the
// view grows (on the device: never the host's resize, which would copy device memory as if it
// were the host's).
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return carry_backend_meta(self, at::native::unfold(self, dimension, size, step));
}

at::Tensor view_as_real(const at::Tensor& self) {
  return carry_backend_meta(self, at::native::view_as_real(self));
}

at::Tensor view_as_complex(const at::Tensor& self) {
  return carry_backend_meta(self, at::native::view_as_complex(self));
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), offset, size, stride);
  for (const int64_t s : size) TORCH_CHECK(s >= 0, "set_: negative size ", s, " in ", size);
  for (const int64_t s : stride) TORCH_CHECK(s >= 0, "set_: negative stride ", s, " in ", stride);
  TORCH_CHECK(stride.empty() || stride.size() == size.size(), "set_: ", size.size(), " sizes but ", stride.size(),
              " strides");
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  const uint64_t needed = self.numel() == 0
                              ? 0
                              : at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.itemsize(),
                                                                 static_cast<size_t>(offset));
  if (needed > self.storage().nbytes()) {
    TORCH_CHECK(self.storage().resizable(), "set_: the storage of ", self.storage().nbytes(),
                " bytes is not resizable and the view needs ", needed);
    resize_storage_bytes(self.storage(), needed);
  }
  return self;
}

std::mutex g_counts_mu;
std::map<std::string, uint64_t> g_counts;  // ATen operator -> calls that ran on the CPU

thread_local std::string t_rejection;  // why the last kernel of this thread did not take its call

// The fallback policy for operator `name`: raises when it is 'error', warns once when 'warn';
// counts the call.
void fallback_policy(const c10::OperatorName& name) {
  const std::string why = std::exchange(t_rejection, {});
  const std::string what = why.empty() ? "has no Spyre kernel" : "is not taken by its Spyre kernel (" + why + ")";
  switch (fallback_mode()) {
    case FallbackMode::kError:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "spyre: operator '", name, "' ", what,
                                  ", and the CPU fallback is disabled "
                                  "(TORCH_SPYRE_CPU_FALLBACK=error). Use torch_spyre.set_cpu_fallback('warn') "
                                  "to run it on the CPU.");
    case FallbackMode::kWarn: {
      static std::mutex mu;
      static std::set<std::string> warned;
      std::lock_guard lock(mu);
      if (warned.insert(c10::toString(name)).second) {
        TORCH_WARN("spyre: operator '", name, "' ", what,
                   "; it runs on the CPU, with copies to and from the device. "
                   "torch_spyre.set_cpu_fallback('allow') silences this; 'error' forbids it.");
      }
      break;
    }
    case FallbackMode::kAllow:
      break;
  }
  const std::lock_guard lock(g_counts_mu);
  ++g_counts[c10::toString(name)];
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_policy(op.schema().operator_name());
  // ATen's fallback puts new results on the device of the first tensor argument, which may be a
  // CPU 0-dim tensor (torch.where(cpu_cond, x, y)): they belong on the spyre device of the call.
  std::optional<c10::Device> device;
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack->size() - n; i < stack->size() && !device; ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) device = v.toTensor().device();
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) {
        if (t.defined() && t.is_privateuseone() && !device) device = t.device();
      }
    }
  }
  at::native::cpu_fallback(op, stack);
  if (!device) return;
  const size_t r = op.schema().returns().size();
  for (size_t i = stack->size() - r; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu()) v = v.toTensor().to(*device);
  }
}

}  // namespace

void note_rejection(const std::string& why) {
  t_rejection = why;
}

uint64_t device_addr(const at::Tensor& t) {
  return device_address(t.data_ptr());
}

at::Tensor read_device(const at::Tensor& src) {
  const c10::DeviceGuard guard(src.device());
  const auto [addr, bytes] = device_span(src);
  at::Tensor buf = at::empty({static_cast<int64_t>(bytes / src.itemsize())}, src.options().device(c10::kCPU));
  DeviceRuntime::get(src.device().index()).d2h(buf.data_ptr(), addr, bytes);
  if (dlfloat(src)) dlfloat_to_ieee(buf.data_ptr(), bytes);
  return buf.as_strided(src.sizes(), src.strides(), 0);
}

void write_device(const at::Tensor& dst, const at::Tensor& src_cpu, bool non_blocking) {
  if (dst.numel() == 0) return;
  const c10::DeviceGuard guard(dst.device());
  DeviceRuntime& rt = DeviceRuntime::get(dst.device().index());
  if (dst.is_contiguous()) {
    at::Tensor c = src_cpu.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    if (dlfloat(dst)) {
      c = c.clone();  // converted in a buffer of our own, never in the caller's tensor
      ieee_to_dlfloat(c.data_ptr(), dst.nbytes());
    }
    rt.h2d(device_addr(dst), c.data_ptr(), dst.nbytes(), non_blocking);
    return;
  }
  // Strided destination: read the span it covers, update it on the host, write the span back.
  const std::lock_guard rmw(rt.host_rmw_mutex());
  const auto [addr, bytes] = device_span(dst);
  if (dlfloat(dst)) {  // merged as the card's own bits: the elements between are not converted twice
    at::Tensor raw = at::empty({static_cast<int64_t>(bytes / 2)}, at::TensorOptions().dtype(at::kShort));
    rt.d2h(raw.data_ptr(), addr, bytes);
    at::Tensor bits = src_cpu.to(at::kHalf).expand(dst.sizes()).contiguous().clone();
    ieee_to_dlfloat(bits.data_ptr(), bits.nbytes());
    raw.as_strided(dst.sizes(), dst.strides(), 0).copy_(bits.view(at::kShort));
    rt.h2d(addr, raw.data_ptr(), bytes);
    return;
  }
  at::Tensor host = read_device(dst);
  host.copy_(src_cpu);
  rt.h2d(addr, host.storage().data(), bytes);
}

std::pair<uint64_t, uint64_t> device_span(const at::Tensor& t) {
  const uint64_t addr = device_address(t.storage().data()) + t.storage_offset() * t.itemsize();
  int64_t extent = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return {addr, 0};
    TORCH_CHECK(t.stride(d) >= 0, "spyre: negative strides are not supported");
    extent += (t.size(d) - 1) * t.stride(d);
  }
  return {addr, static_cast<uint64_t>(extent) * t.itemsize()};
}

void run_on_cpu_as(const c10::OperatorHandle& named, const c10::OperatorHandle& cpu_op, torch::jit::Stack* stack) {
  fallback_policy(named.schema().operator_name());
  at::native::cpu_fallback(cpu_op, stack);
}

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback(op, stack);
}

std::map<std::string, uint64_t> fallback_counts(bool reset) {
  const std::lock_guard lock(g_counts_mu);
  std::map<std::string, uint64_t> out = g_counts;
  if (reset) g_counts.clear();
  return out;
}

// Autograd asks for "efficient" zero tensors (a ZeroTensor on CUDA); a plain zero-filled tensor
// has the same values.
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  at::Tensor t = empty_memory_format(size, dtype, layout, device, pin_memory, std::nullopt);
  return t.zero_();
}

// tensor.record_stream(s): the caching allocator keeps the storage's block from reuse until the
// work queued on `s` so far has finished.
void record_stream(at::Tensor& self, c10::Stream s) {
  TORCH_CHECK(s.device_type() == c10::DeviceType::PrivateUse1 && s.device_index() == self.device().index(),
              "spyre: record_stream needs a stream of the tensor's device (", self.device(), "), got ", s);
  c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->recordDataPtrOnStream(self.storage().data_ptr(), s);
}

// _assert_async(self, msg): as on CPU, checked at the call (one read-back of the element).
void assert_async(const at::Tensor& self, c10::string_view msg) {
  TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  TORCH_CHECK(self.is_nonzero(), msg.empty() ? "Expected Tensor with single nonzero value, but got zero" : msg);
}

void assert_async_plain(const at::Tensor& self) {
  assert_async(self, "");
}

// Whether `self.data = from` may swap the storage in place. torch answers yes for two dense tensors
// only on its own devices; spyre's dense tensors are the same TensorImpl, so module.to("spyre")
// keeps each Parameter object (and its class: a lazy module's UninitializedParameter stays one).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    const c10::DispatchKeySet keys = t.key_set();
    return t.layout() == c10::kStrided && keys.has(c10::DispatchKey::Dense) &&
           (t.device().is_cpu() || t.device().is_privateuseone()) && !keys.has(c10::DispatchKey::Python);
  };
  return dense(self) && dense(from);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("_assert_async", TORCH_FN(assert_async_plain));
  m.impl("_assert_async.msg", TORCH_FN(assert_async));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_in_place));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  // Views torch has no generic kernel for: metadata over the same storage, never a fallback (a
  // CPU copy would lose writes through the view). (The physical conjugate, whose generic kernel
  // calls a per-device stub, is torch_spyre/_fft.py's.)
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
}

// A copy from or into a tensor with a math bit set reaches the device's _copy_from with the bit,
// which copy_from resolves: torch's math-bit fallbacks would materialise the source by a clone,
// whose copy is this very _copy_from again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace spyre::backend
