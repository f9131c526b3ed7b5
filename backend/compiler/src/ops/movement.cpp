// Data movement: cat (each input copied into its slice of the result), slice_scatter (the base
// copied, then the source over a strided slice of it) and roll (a copy per block that moves as one). Views need no
// lowering: the front doors fold them into the strides of the views they pass.
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

// roll(self, shifts, dims): element i along each rolled dim comes from (i - shift) mod n. Along a
// dim the input splits into at most two blocks that move whole, so the result is at most 2^k copies
// for k dims. Without dims the flattened tensor rolls (the input is packed for that).
void roll(Builder& b, const Call& c) {
  const uint32_t out = c.out();
  if (b.view(out).numel() == 0) return;
  uint32_t in = c.tensor("self");
  const Arg* shifts = c.get("shifts");
  const Arg* dims_arg = c.get("dims");
  if (!shifts || shifts->kind != Arg::Kind::kInts) reject(c, "'shifts' is not a list of ints");
  std::vector<int64_t> dims = dims_arg && dims_arg->kind == Arg::Kind::kInts ? dims_arg->ints : std::vector<int64_t>{};
  uint32_t dst = out;
  if (dims.empty()) {  // the flattened tensor
    if (shifts->ints.size() != 1) reject(c, "a roll without dims takes one shift");
    in = packed(b, in);
    const int64_t n = b.view(in).numel();
    in = b.derive(in, {n}, {1});
    if (!is_contiguous(b.view(out))) reject(c, "a roll without dims writes a contiguous result");
    dst = b.derive(out, {n}, {1});
    dims = {0};
  }
  if (shifts->ints.size() != dims.size()) reject(c, "shifts and dims differ in length");
  const ir::View x = b.view(in), o = b.view(dst);
  // A dim may come more than once (its shifts add up), in any order.
  std::vector<int64_t> shift(x.sizes.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i) shift[size_t(wrap_dims({dims[i]}, x.sizes.size()).at(0))] += shifts->ints[i];
  struct Block {
    int64_t from, to, len;
  };
  std::vector<std::vector<Block>> per_dim(x.sizes.size());
  for (size_t d = 0; d < x.sizes.size(); ++d) {
    const int64_t n = x.sizes[d], s = ((shift[d] % n) + n) % n;
    per_dim[d] = {{0, 0, n}};
    if (s != 0) per_dim[d] = {{0, s, n - s}, {n - s, 0, s}};
  }
  // Every combination of one block per dim.
  std::vector<size_t> pick(x.sizes.size(), 0);
  while (true) {
    int64_t from = 0, to = 0;
    std::vector<int64_t> sizes;
    for (size_t d = 0; d < pick.size(); ++d) {
      const Block& k = per_dim[d][pick[d]];
      from += k.from * x.strides[d];
      to += k.to * o.strides[d];
      sizes.push_back(k.len);
    }
    copy(b, b.derive(in, from, sizes, x.strides), b.derive(dst, to, sizes, o.strides));
    size_t d = 0;
    while (d < pick.size() && ++pick[d] == per_dim[d].size()) pick[d++] = 0;
    if (d == pick.size()) break;
  }
}

}  // namespace

const Table& movement_ops() {
  static const Table t = {{"cat", cat}, {"slice_scatter", slice_scatter}, {"roll", roll}};
  return t;
}

}  // namespace spyre::compiler::ops
