// What the op library's families share: the table each family contributes (op name -> lowering),
// and the small view and op helpers their lowerings are written with.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spyre/compiler/ops.h"

namespace spyre::compiler::ops {

using Lowering = void (*)(Builder&, const Call&);
/// An op of a family: its lowering, and how many of its leading results it writes.
struct Op {
  Op(Lowering f, uint32_t n = 1) : lower(f), results(n) {}  // NOLINT(google-explicit-constructor): table rows
  Lowering lower;
  uint32_t results;
};
using Table = std::map<std::string, Op, std::less<>>;

/// Each family's ops (pointwise ops are in pointwise_op's table, lowered by lower_pointwise).
const Table& reduce_ops();
const Table& matmul_ops();
const Table& index_ops();
const Table& movement_ops();
const Table& attention_ops();
const Table& conv_ops();

/// The pointwise op's expression written into `out` (in its compute type).
void lower_pointwise(Builder& b, const Call& c);
/// Every pointwise op's name.
std::vector<std::string> pointwise_names();

[[noreturn]] void reject(const Call& c, const std::string& why);

/// Row-major strides of `sizes`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
bool is_contiguous(const ir::View& v);
/// Whether two views may share memory: one argument, and their spans of elements cross.
bool overlap(const ir::View& a, const ir::View& b);
/// Dims `dims` of an n-dim tensor wrapped into [0, n) and sorted, or every dim when empty.
std::vector<int64_t> wrap_dims(std::vector<int64_t> dims, size_t n);

/// Argument `a` of call `c` (a view, a number or a fused expression) written into view `out`,
/// converted to `out`'s type.
void write(Builder& b, const Call& c, const Arg& a, uint32_t out);
/// out = in (any strides, broadcast to out's shape, converted); as several copies when it walks
/// more than kMaxCopyDims dims.
void copy(Builder& b, uint32_t in, uint32_t out);
inline constexpr size_t kMaxCopyDims = 5;
/// out = in * k, in the compute type `t` (in and out may be one view).
void scale(Builder& b, uint32_t in, uint32_t out, double k, hw::DType t = hw::DType::kF32);
/// out = value.
void fill(Builder& b, uint32_t out, double value);
/// view `v` contiguous: itself when it is, else a contiguous temporary it is copied into.
uint32_t packed(Builder& b, uint32_t v);
/// out = fn over `dims` of `in` (out in the keepdim form). When the reduced dims do not merge into
/// one run of the input, reduces a copy with the kept dims first instead.
void reduce(Builder& b, hw::ReduceFn fn, hw::DType compute, uint32_t in, uint32_t out, std::vector<int64_t> dims);

}  // namespace spyre::compiler::ops
