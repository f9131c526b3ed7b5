#include "layout.h"

#include <stdexcept>

#include <fmt/format.h>

#include "spyre/compiler/errors.h"

namespace spyre::compiler::lower {

int64_t Space::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::vector<int64_t> broadcast_strides(const ir::View& v, const std::vector<int64_t>& shape) {
  const size_t n = shape.size(), k = v.sizes.size();
  if (k > n || v.strides.size() != k) {
    throw Malformed(fmt::format("compiler: a {}-d operand does not broadcast to {} dims", k, n));
  }
  std::vector<int64_t> out(n, 0);
  for (size_t j = n - k; j < n; ++j) {
    const size_t jj = j - (n - k);
    if (v.sizes[jj] == shape[j]) {
      out[j] = v.strides[jj];
    } else if (v.sizes[jj] != 1) {
      throw Malformed(
          fmt::format("compiler: operand size {} does not broadcast to {} in dim {}", v.sizes[jj], shape[j], j));
    }
  }
  return out;
}

Space simplify(Space s) {
  Space out;
  out.strides.resize(s.strides.size());
  for (size_t d = 0; d < s.sizes.size(); ++d) {
    if (s.sizes[d] == 1) continue;
    // Dim d continues the last kept dim when, in every operand, one step of that dim is a whole run of d.
    const auto continues_last = [&] {
      for (size_t o = 0; o < s.strides.size(); ++o) {
        if (out.strides[o].back() != s.strides[o][d] * s.sizes[d]) return false;
      }
      return true;
    };
    const bool merge = !out.sizes.empty() && continues_last();
    if (merge) {
      out.sizes.back() *= s.sizes[d];
      for (size_t o = 0; o < s.strides.size(); ++o) out.strides[o].back() = s.strides[o][d];
    } else {
      out.sizes.push_back(s.sizes[d]);
      for (size_t o = 0; o < s.strides.size(); ++o) out.strides[o].push_back(s.strides[o][d]);
    }
  }
  return out;
}

}  // namespace spyre::compiler::lower
