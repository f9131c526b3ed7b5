// What the pointwise family's files share (pointwise.cpp, pointwise_math.cpp,
// pointwise_activations.cpp): the table's type, the constructors of its rows and the helpers the
// rows' expressions use. Internal to the family.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "family.h"

namespace spyre::compiler::ops::pointwise {

using hw::BinaryFn;
using hw::DType;
using hw::UnaryFn;
using ir::Expr;
using Refs = std::vector<int32_t>;
using Table = PointwiseTable;

// The ref of an optional input the call does not have (clamp without a bound).
inline constexpr int32_t kAbsent = std::numeric_limits<int32_t>::min();

/// A row: the arguments it reads (all promoted together), torch's type rule, one element's expression.
PointwiseOp row(std::vector<std::string> inputs, Types types, Build build);
/// A row that is one SFP function of `self` (of `self` and `other`).
PointwiseOp unary(UnaryFn fn, Types types);
PointwiseOp binary(BinaryFn fn, Types types);

bool is_float(DType t);
/// The largest finite value of a floating type.
double largest(DType t);
/// Whether float x's sign bit is set (-0.0 included; a NaN's reads as clear).
int32_t sign_bit(Expr& e, int32_t x);

/// The rows of pointwise_math.cpp and pointwise_activations.cpp, added to `t`.
void add_derived_math(Table& t);
void add_special_math(Table& t);
void add_activations(Table& t);

}  // namespace spyre::compiler::ops::pointwise
