#include "golden.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace spyre::simtool {
namespace {

// fp32's unit roundoff: what a different summation order or a float library function may add.
constexpr double kF32 = 5.960464477539063e-08;  // 2^-24

double gelu_erf(double x, double) {
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
}

double gelu_tanh(double x, double) {
  const double c = 0.79788456080286535588;  // sqrt(2 / pi)
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

}  // namespace

Expected gemm_reference(const std::vector<float>& a, const std::vector<float>& b, uint32_t m, uint32_t k, uint32_t n,
                        double u) {
  std::vector<float> c(uint64_t{m} * n, 0.0f);
  for (uint64_t i = 0; i < m; ++i) {
    float* ci = &c[i * n];
    for (uint64_t p = 0; p < k; ++p) {
      const float aip = a[i * k + p];
      const float* bp = &b[p * n];
      for (uint64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
    }
  }
  // sum_p |a_ip b_pj| <= |a_i| |b_j| (Cauchy-Schwarz) bounds the summation error of element ij.
  std::vector<double> row(m, 0.0), col(n, 0.0);
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t p = 0; p < k; ++p) row[i] += double{a[i * k + p]} * a[i * k + p];
  }
  for (uint64_t p = 0; p < k; ++p) {
    for (uint64_t j = 0; j < n; ++j) col[j] += double{b[p * n + j]} * b[p * n + j];
  }
  Expected e;
  e.values.assign(c.begin(), c.end());
  e.tolerance.resize(c.size());
  const double order = 8 * std::sqrt(static_cast<double>(k)) * kF32;
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t j = 0; j < n; ++j) {
      const double want = e.values[i * n + j];
      e.tolerance[i * n + j] = 2 * u * std::fabs(want) + order * std::sqrt(row[i] * col[j]) + 1e-30;
    }
  }
  return e;
}

ScalarFn elementwise_function(const std::string& op) {
  static const std::map<std::string, ScalarFn> fns = {
      {"add", [](double a, double b) { return a + b; }},
      {"sub", [](double a, double b) { return a - b; }},
      {"mul", [](double a, double b) { return a * b; }},
      {"div", [](double a, double b) { return a / b; }},
      {"max", [](double a, double b) { return std::max(a, b); }},
      {"min", [](double a, double b) { return std::min(a, b); }},
      {"neg", [](double a, double) { return -a; }},
      {"abs", [](double a, double) { return std::fabs(a); }},
      {"relu", [](double a, double) { return a > 0 ? a : 0.0; }},
      {"exp", [](double a, double) { return std::exp(a); }},
      {"log", [](double a, double) { return std::log(a); }},
      {"sqrt", [](double a, double) { return std::sqrt(a); }},
      {"rsqrt", [](double a, double) { return 1 / std::sqrt(a); }},
      {"tanh", [](double a, double) { return std::tanh(a); }},
      {"sigmoid", [](double a, double) { return 1 / (1 + std::exp(-a)); }},
      {"silu", [](double a, double) { return a / (1 + std::exp(-a)); }},
      {"gelu", &gelu_erf},
      {"gelu_tanh", &gelu_tanh},
      {"sin", [](double a, double) { return std::sin(a); }},
      {"cos", [](double a, double) { return std::cos(a); }},
  };
  const auto it = fns.find(op);
  return it == fns.end() ? nullptr : it->second;
}

Expected elementwise_reference(ScalarFn f, const std::vector<float>& a, const std::vector<float>& b, double u) {
  Expected e;
  e.values.resize(a.size());
  e.tolerance.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double want = f(a[i], b.empty() ? 0.0 : double{b[i]});
    e.values[i] = want;
    // One rounding into the output type, and a few fp32 ulps of the card's float functions.
    e.tolerance[i] = (2 * u + 16 * kF32) * std::fabs(want) + 16 * kF32;
  }
  return e;
}

Expected layernorm_reference(const std::vector<float>& x, uint32_t rows, uint32_t cols, double eps, double u) {
  Expected e;
  e.values.resize(x.size());
  e.tolerance.resize(x.size());
  const double order = 16 * std::sqrt(static_cast<double>(cols)) * kF32;
  for (uint64_t r = 0; r < rows; ++r) {
    const float* row = &x[r * cols];
    float sum = 0;
    for (uint32_t c = 0; c < cols; ++c) sum += row[c];
    const float mean = sum / static_cast<float>(cols);
    float sq = 0;
    for (uint32_t c = 0; c < cols; ++c) sq += (row[c] - mean) * (row[c] - mean);
    const double rstd = 1 / std::sqrt(double{sq} / cols + eps);
    for (uint32_t c = 0; c < cols; ++c) {
      const double want = (double{row[c]} - mean) * rstd;
      e.values[r * cols + c] = want;
      e.tolerance[r * cols + c] = 2 * u * std::fabs(want) + order * (1 + std::fabs(want));
    }
  }
  return e;
}

Expected attention_reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             uint32_t bh, uint32_t seq, uint32_t dim, double scale, double u) {
  Expected e;
  e.values.resize(q.size());
  e.tolerance.resize(q.size());
  std::vector<float> w(seq), o(dim), weighted_abs(dim);
  const double order = 16 * (std::sqrt(static_cast<double>(seq)) + std::sqrt(static_cast<double>(dim))) * kF32;
  for (uint64_t h = 0; h < bh; ++h) {
    const uint64_t base = h * seq * dim;
    for (uint64_t i = 0; i < seq; ++i) {
      const float* qi = &q[base + i * dim];
      float best = -INFINITY;
      for (uint64_t j = 0; j < seq; ++j) {
        const float* kj = &k[base + j * dim];
        float s = 0;
        for (uint32_t d = 0; d < dim; ++d) s += qi[d] * kj[d];
        w[j] = static_cast<float>(s * scale);
        best = std::max(best, w[j]);
      }
      float sum = 0;
      for (uint64_t j = 0; j < seq; ++j) {
        w[j] = std::exp(w[j] - best);
        sum += w[j];
      }
      std::fill(o.begin(), o.end(), 0.0f);
      std::fill(weighted_abs.begin(), weighted_abs.end(), 0.0f);
      for (uint64_t j = 0; j < seq; ++j) {
        const float p = w[j] / sum;
        const float* vj = &v[base + j * dim];
        for (uint32_t d = 0; d < dim; ++d) {
          o[d] += p * vj[d];
          weighted_abs[d] += p * std::fabs(vj[d]);
        }
      }
      for (uint32_t d = 0; d < dim; ++d) {
        // Rounding each weight p_j (by at most u p_j) moves the output by at most u sum_j p_j |v_jd|.
        const double want = o[d];
        e.values[base + i * dim + d] = want;
        e.tolerance[base + i * dim + d] = 2 * u * (std::fabs(want) + weighted_abs[d]) + order * (1 + std::fabs(want));
      }
    }
  }
  return e;
}

CheckResult compare(const std::vector<float>& got, const Expected& want) {
  if (got.size() != want.values.size()) {
    throw std::logic_error("check: the result and the golden model differ in size");
  }
  CheckResult r;
  r.elements = got.size();
  r.worst_ratio = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want.values[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / want.tolerance[i];
    if (!(err <= want.tolerance[i])) ++r.mismatches;
    if (!std::isnan(err)) r.max_abs_error = std::max(r.max_abs_error, err);
    if (ratio > r.worst_ratio) {
      r.worst_ratio = ratio;
      r.worst_index = i;
      r.worst_got = got[i];
      r.worst_want = want.values[i];
    }
  }
  r.worst_ratio = std::max(r.worst_ratio, 0.0);
  r.passed = r.mismatches == 0;
  return r;
}

}  // namespace spyre::simtool
