// The two ways the compiler refuses, as two types, so that nobody mistakes one for the other.
#pragma once

#include <stdexcept>
#include <string>

namespace spyre::compiler {

/// A well-formed graph or call that no lowering takes (a stride, type or size outside what the
/// kernels handle, a scratchpad too small for a tile). The caller may run it another way: the
/// PyTorch device falls back to the CPU (or raises, when the fallback is off), the torch.compile
/// front door runs the segment's ops one by one.
class Unsupported : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A graph, call, program or document that is wrong in itself (a view past its argument, shapes
/// that do not agree, an unknown field). Whoever built it has a bug: it is raised, never a reason
/// to fall back quietly.
class Malformed : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace spyre::compiler
