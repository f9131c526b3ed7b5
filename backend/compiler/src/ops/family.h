// What the op library's families share: the table each family contributes (op name -> lowering),
// and the small view and op helpers their lowerings are written with.
#pragma once

#include <initializer_list>
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

// ---- the special functions' rows (special.cpp) ----------------------------------------------------

using PointwiseTable = std::map<std::string, PointwiseOp, std::less<>>;
/// Adds the Bessel, Airy, normal-quantile, zeta, incomplete-gamma and orthogonal-polynomial rows.
void add_special_functions(PointwiseTable& t);
/// c[0] + t (c[1] + t (c[2] + ...)) in `e`: a polynomial in t by Horner's rule; the result's ref.
int32_t horner(ir::Expr& e, int32_t t, std::initializer_list<double> c);
/// log(Gamma(x)) for x >= 0.5 (Lanczos, g = 7, nine terms; relative error near 1e-7 in fp32).
int32_t lanczos_lgamma(ir::Expr& e, int32_t x);
/// erfc(z) for z >= 0 to a relative 1.2e-7; with `scaled`, erfcx(z) = exp(z^2) erfc(z).
int32_t erfc_positive(ir::Expr& e, int32_t z, bool scaled);
/// The modified Bessel function I0 or I1 (`order`) of x, relative error below 2.2e-7; with
/// `scaled`, exp(-|x|) times it.
int32_t bessel_i(ir::Expr& e, int32_t x, int order, bool scaled);
/// Every pointwise op's name.
std::vector<std::string> pointwise_names();

/// x rounded to the nearest value of type t (ties to even), as torch rounds a Scalar to a tensor's
/// type; x itself for fp32 and wider.
double rounded_to(double x, hw::DType t);

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
