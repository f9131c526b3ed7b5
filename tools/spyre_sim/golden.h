// Host golden models of the built-in kernels: plain loops with fp32 accumulation (functions in
// double), written from the math alone, not from the compiler or the simulator. Each gives the
// expected values and an absolute tolerance per element, built from the unit roundoff `u` of the
// stored types (numerics.h): what one rounding of the result, the rounding of any narrow
// intermediate, and a different fp32 summation order can account for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spyre::simtool {

/// The expected values of one output buffer and how far the device may be from each (absolute).
struct Expected {
  uint32_t buffer = 0;  // index into Kernel::buffers
  std::vector<double> values;
  std::vector<double> tolerance;
};

/// C = A @ B (A: m x k, B: k x n, row-major).
Expected gemm_reference(const std::vector<float>& a, const std::vector<float>& b, uint32_t m, uint32_t k, uint32_t n,
                        double u);

/// An elementwise function of one or two arguments (the second is 0 for unary functions).
using ScalarFn = double (*)(double, double);
/// The function named `op` ("add", "exp", "gelu", ...), or nullptr when there is none.
ScalarFn elementwise_function(const std::string& op);
/// out[i] = f(a[i], b[i]), or f(a[i], 0) when `b` is empty.
Expected elementwise_reference(ScalarFn f, const std::vector<float>& a, const std::vector<float>& b, double u);

/// (x - mean) / sqrt(var + eps) of each row of a rows x cols matrix (var: the biased variance).
Expected layernorm_reference(const std::vector<float>& x, uint32_t rows, uint32_t cols, double eps, double u);

/// softmax(Q K^T * scale) V per (batch, head) of [bh, seq, dim] tensors; `u` is the unit roundoff of
/// the operands' type, which the softmax weights are rounded to before the second product.
Expected attention_reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             uint32_t bh, uint32_t seq, uint32_t dim, double scale, double u);

/// How a device result compares with its expected values.
struct CheckResult {
  bool passed = false;
  uint64_t elements = 0;
  uint64_t mismatches = 0;   // elements farther than their tolerance (or NaN where a number was expected)
  double max_abs_error = 0;  // over every element
  double worst_ratio = 0;    // the largest |got - want| / tolerance; at most 1 when passed
  uint64_t worst_index = 0;  // the element of worst_ratio
  double worst_got = 0, worst_want = 0;
};

/// Compares `got` with `want` element by element.
CheckResult compare(const std::vector<float>& got, const Expected& want);

}  // namespace spyre::simtool
