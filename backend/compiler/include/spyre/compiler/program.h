// Kernel compiler: turns one operation into a tile-ISA program for a set of cores. Knows the
// hardware interface and the device's limits, not torch. Programs are position independent:
// every device address comes from the launch's argument block.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "spyre/compiler/ir.h"
#include "spyre/hw/figures.h"
#include "spyre/hw/isa.h"

namespace spyre::compiler {

/// What the compiler needs to know about the device. Cores and scratchpad size decide what is
/// legal; the rates (defaults: the public Spyre figures) only steer the choice of tile sizes.
/// The card a program is planned for: the figures it reports in its capability registers (the
/// driver's DeviceInfo::card). Tile sizes follow its scratchpad; work division weighs its PT rate
/// against hw::CardFigures::load_bytes_per_cycle (memory and ring). Defaults: the default card.
struct Target : hw::CardFigures {
  Target() = default;
  explicit Target(const hw::CardFigures& card) : hw::CardFigures(card) {}
  /// The default card with `cores` cores and `lx_bytes` of scratchpad each (for tests).
  Target(uint32_t cores_, uint64_t lx_bytes_) {
    cores = cores_;
    lx_bytes = lx_bytes_;
  }
};

/// Tensors one pointwise op (one fused expression) may read: its loop nest walks these and its output.
inline constexpr uint32_t kMaxPointwiseInputs = 3;

/// What a listing shows beside a program's instructions (not part of the image): where the code of
/// each op of its IR graph starts, and which tensor view each launch argument addresses.
struct ProgramNotes {
  std::vector<std::pair<uint32_t, std::string>> sections;  // (first instruction, the op), in order
  std::vector<std::string> args;                           // argument slot -> "in f32 [64, 32]"
};

/// A compiled program: the bytes to load into device memory and how to launch them.
struct Program {
  std::string name;            // for traces and logs, e.g. "mm f32 1024x1024x1024"
  std::vector<uint8_t> image;  // header, entry table, instructions (see spyre/hw/isa.h)
  uint64_t core_mask = 0;
  uint32_t num_args = 0;  // argument slots the launch must fill
  ProgramNotes notes;     // for listings; compile() fills it
};

/// Assembles per-core instruction streams into a program image. Each stream gets a kEnd appended;
/// `strings` are PRINT's format strings (message i is strings[i]).
Program assemble(std::string name, const std::vector<std::vector<hw::Instr>>& per_core, uint32_t num_args,
                 const std::vector<std::string>& strings = {});
/// Assembles one instruction stream that every one of `cores` cores runs from its start (SPMD).
Program assemble_spmd(std::string name, std::vector<hw::Instr> code, uint32_t cores, uint32_t num_args);

/// The instructions of a program image as text, one decoded instruction per line, numbered from 0
/// (for debug dumps; a fault's instruction index is a line number here). With `notes`, each op's
/// code is headed by the op (`; op 1: reduce f32 [64,1]`) and each ARG names its tensor.
std::string listing(const std::vector<uint8_t>& image, const ProgramNotes& notes = {});
/// One instruction decoded: its mnemonic, dtype, operands (registers, scratchpad and device
/// addresses, shapes) and function, e.g. `GATHER   f32 lx[0x0] <- mem[r2+0x0][lx[0x40][i] * 16] ...`.
std::string disassemble(const hw::Instr& in);

/// Compiles a graph into one program: its ops run in order, each split over the cores, with a
/// barrier between consecutive ops. Throws Malformed for a malformed graph and Unsupported for a
/// shape, stride or size no lowering takes (spyre/compiler/errors.h), each naming the problem.
Program compile(const ir::Graph& graph, const Target& target);

/// C = A @ B with A: M x K, B: K x N, C: M x N, all row-major with row strides in elements
/// (lda >= K, ldb >= N, ldc >= N). Arguments: slot 0 = A, 1 = B, 2 = C (device addresses).
/// Accumulates in fp32; `out` may be narrower than fp32 (rounded once at the end).
struct MatmulSpec {
  uint32_t m = 0, k = 0, n = 0;
  hw::DType in = hw::DType::kF32;
  hw::DType out = hw::DType::kF32;
  uint64_t lda = 0, ldb = 0, ldc = 0;
};

/// Tiles the matmul for the scratchpad and divides output tiles over the cores.
/// Throws Malformed naming the field when the spec is malformed.
Program compile_matmul(const MatmulSpec& spec, const Target& target);

}  // namespace spyre::compiler
