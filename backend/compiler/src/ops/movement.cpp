// Data movement: cat (each input copied into its slice of the result) and slice_scatter (the base
// copied, then the source over a strided slice of it). Views need no lowering: the front doors fold
// them into the strides of the views they pass.
#include <algorithm>

#include <fmt/format.h>

#include "family.h"

namespace spyre::compiler::ops {
namespace {

// cat(tensors, dim): inputs converted to the result's type as they are copied; empty ones (torch's
// legacy 1-d empties among them) take no room.
void cat(Builder& b, const Call& c) {
  const Arg* tensors = c.get("tensors");
  if (!tensors || tensors->kind != Arg::Kind::kTensors) reject(c, "'tensors' is not a list of tensors");
  const uint32_t out = c.out();
  const ir::View o = b.view(out);
  if (o.numel() == 0) return;
  const int64_t dim = wrap_dims({c.integer("dim", 0)}, o.sizes.size()).at(0);
  int64_t at = 0;
  for (const uint32_t v : tensors->views) {
    const ir::View x = b.view(v);
    if (x.numel() == 0) continue;
    if (x.sizes.size() != o.sizes.size()) reject(c, "an input's rank differs from the result's");
    std::vector<int64_t> sizes = o.sizes;
    sizes[size_t(dim)] = x.sizes[size_t(dim)];
    copy(b, v, b.derive(out, at * o.strides[size_t(dim)], sizes, o.strides));
    at += x.sizes[size_t(dim)];
  }
  if (at != o.sizes[size_t(dim)]) reject(c, "the inputs do not fill the result along dim");
}

// slice_scatter(self, src, dim, start, end, step): the result is self with src written over
// result[..., start:end:step, ...] along dim.
void slice_scatter(Builder& b, const Call& c) {
  const uint32_t out = c.out();
  const ir::View o = b.view(out);
  if (o.numel() == 0) return;
  const Arg* self = c.get("self");
  if (!self) reject(c, "'self' is missing");
  write(b, c, *self, out);
  const uint32_t src = c.tensor("src");
  const ir::View s = b.view(src);
  if (s.numel() == 0) return;
  const size_t dim = size_t(wrap_dims({c.integer("dim", 0)}, o.sizes.size()).at(0));
  const int64_t size = o.sizes[dim];
  int64_t start = c.integer("start", 0), step = c.integer("step", 1);
  if (step <= 0) reject(c, "the step must be positive");
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  std::vector<int64_t> strides = o.strides;
  strides[dim] *= step;
  if (s.sizes.size() != o.sizes.size()) reject(c, "src's rank differs from the result's");
  copy(b, src, b.derive(out, start * o.strides[dim], s.sizes, strides));
}

}  // namespace

const Table& movement_ops() {
  static const Table t = {{"cat", cat}, {"slice_scatter", slice_scatter}};
  return t;
}

}  // namespace spyre::compiler::ops
