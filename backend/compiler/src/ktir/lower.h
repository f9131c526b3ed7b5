// The KTIR lowering's state: one Lowering per compute tile (core) walks the kernel's function with
// that tile's id, evaluating every index (tile id, loop counters, constants) and emitting the
// instructions the tile runs. Tensors live in the scratchpad; device memory is reached through
// views and access tiles. lower.cpp holds control flow, values and memory; compute.cpp the
// arithmetic on tensors; collective.cpp the inter-tile transfers and indirect access tiles.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "affine.h"
#include "spyre/compiler/emit.h"
#include "spyre/compiler/ktir.h"
#include "syntax.h"

namespace spyre::compiler::ktir {

/// A device address: the base of function argument `arg`, plus `elems` elements of the view built
/// on it.
struct Ptr {
  int arg = -1;
  int64_t elems = 0;
};

/// A tensor in this core's scratchpad, dense and row-major.
struct TensorV {
  uint32_t addr = 0;
  std::vector<int64_t> shape;
  hw::DType dtype = hw::DType::kF32;
  bool fresh = false;   // tensor.empty, never written: a destination to write into
  bool shared = false;  // another value aliases its bytes (a reshape): never overwritten in place
  bool zero = false;    // known to hold zeros (linalg.fill 0): a matmul may overwrite, not add
  int64_t numel() const;
  uint32_t bytes() const { return static_cast<uint32_t>(numel()) * hw::dtype_size(dtype); }
};

struct ViewV {
  bool local = false;  // ct_local / LX: this core's scratchpad at `lx`; else device memory at base
  Ptr base;
  uint32_t lx = 0;
  std::vector<int64_t> sizes, strides;
  hw::DType dtype = hw::DType::kF32;
};

/// An indirect access tile's index source: `index`'s elements over a box (origin, shape), one
/// per row of the rows the tile selects along the base view's dim 0.
struct Indirect {
  ViewV index;
  std::vector<int64_t> origin, shape;
};

struct TileV {
  ViewV view;
  std::vector<int64_t> origin, shape;
  bool indirect = false;  // dim 0's coordinates come from `rows`
  Indirect rows;
};

/// What inter_tile_produce leaves for the reduce: each producer's partial, at its slot of the
/// workspace, for the tiles of each group.
struct FutureV {
  uint64_t workspace = 0;  // byte offset of slot 0
  std::vector<int64_t> shape;
  hw::DType dtype = hw::DType::kF32;
  std::vector<std::vector<int64_t>> groups;  // the producer ranks of each group, in order
};

using Value = std::variant<std::monostate, int64_t, double, Ptr, ViewV, TileV, TensorV, FutureV>;

/// What every core's lowering adds to: the kernel's arguments, workspace and work.
struct Shared {
  const Module* module = nullptr;
  const Target* target = nullptr;
  std::vector<Argument> arguments;
  std::vector<int64_t> grid;
  uint64_t workspace_bytes = 0;
  Work work;
  std::vector<std::string> strings;  // gpu.printf's formats: PRINT message i is strings[i]
};

class Lowering {
 public:
  Lowering(const Op& func, Shared* shared, int64_t rank);
  /// Emits the tile's instructions; `code` and `lines` (the KTIR line of each) hold them after.
  void run();

  std::vector<hw::Instr> code;
  std::vector<int> lines;

 private:
  struct Frame {
    std::map<std::string, size_t> last_use;  // the last op of the block that uses each value
    std::set<std::string> defined;           // values the block defines (its args included)
    size_t at = 0;                           // the op being lowered
  };

  // lower.cpp: values, blocks and control flow.
  /// Lowers the ops of `b` with its arguments (named by its label, else by `names`) bound to
  /// `args`; the values its terminator yields.
  std::vector<Value> block(const Block& b, const std::vector<std::string>& names, const std::vector<Value>& args);
  void op(const Op& o);
  Value& value(const std::string& name, int line);
  int64_t integer(const std::string& name, int line);
  double scalar(const std::string& name, int line);
  TensorV tensor(const std::string& name, int line);
  void define(const Op& o, std::vector<Value> results);
  /// Whether the op being lowered is the last use of `name` in the block that defines it (so its
  /// scratchpad may take the op's result).
  bool last_use(const std::string& name) const;
  std::vector<Value> scf_for(const Op& o);
  std::vector<Value> scf_if(const Op& o);
  void arith_int(const Op& o);
  void constant(const Op& o);

  // lower.cpp: memory.
  uint32_t alloc(uint64_t bytes, int line);
  TensorV new_tensor(std::vector<int64_t> shape, hw::DType dtype, int line);
  void emit(hw::Instr in);
  /// The transfers of the tags in `mask` are waited for before the next instruction.
  void retire(uint32_t mask);
  /// A tag for the next asynchronous load, its last transfer retired if still in flight.
  uint32_t load_tag();
  void before_read(uint32_t addr, uint32_t bytes);
  void before_write(uint32_t addr, uint32_t bytes);
  void memory_view(const Op& o);
  void access_tile(const Op& o);
  void load(const Op& o);
  void store(const Op& o);
  void transfer(const TileV& t, const TensorV& x, bool to_device, int line);
  uint32_t arg_reg(int arg) const { return 1 + static_cast<uint32_t>(arg); }

  // compute.cpp: tensors.
  void elementwise(const Op& o);
  void math_unary(const Op& o);
  void convert(const Op& o);
  void fill(const Op& o);
  void matmul(const Op& o);
  void reduce(const Op& o);
  void broadcast(const Op& o);
  void transpose(const Op& o);
  void generic(const Op& o);
  void reshape(const Op& o);
  void printf(const Op& o);
  TensorV destination(const std::string& outs, const std::vector<int64_t>& shape, hw::DType dtype, bool keep, int line);
  void copy(const TensorV& from, const TensorV& to);
  TensorV scalar_tensor(double x, hw::DType dtype, int line);

  // collective.cpp: tiles talking to tiles, and indirect access.
  void produce(const Op& o);
  void inter_reduce(const Op& o);
  void indirect_tile(const Op& o);
  void gather(const TileV& t, const TensorV& x, int line);

  const Op& func_;
  Shared& shared_;
  int64_t rank_;
  std::vector<int64_t> tile_id_;
  std::map<std::string, Value> values_;
  std::vector<Frame*> frames_;
  std::vector<Value> yielded_;
  uint32_t top_ = 0;        // the scratchpad grows down from its end
  uint32_t floor_ = 0;      // ct_local views claim [0, floor_)
  uint64_t workspace_ = 0;  // this tile's next workspace offset
  int line_ = 0;            // the KTIR line being lowered
  struct Pending {
    uint32_t lo, hi, tag;
    bool store;
  };
  std::vector<Pending> pending_;
  uint32_t next_tag_ = 0;
  uint64_t iterations_ = 0;  // loop iterations unrolled so far
  static constexpr size_t kMaxInstructions = size_t{1} << 20;
  static constexpr uint64_t kMaxIterations = uint64_t{1} << 20;
  uint32_t wait_ = 0;  // tags the next instruction must wait for (emit() issues the WAIT)
};

/// The SFP function an arith, math or named linalg op computes ("arith.addf", "linalg.max",
/// "math.exp": the part after the dot), or nullopt.
std::optional<hw::BinaryFn> binary_fn(const std::string& name);
std::optional<hw::UnaryFn> unary_fn(const std::string& name);
/// The REDUCE function a reduction's combining op folds with (add, max, min, mul), or nullopt.
std::optional<hw::ReduceFn> reduce_fn(std::optional<hw::BinaryFn> combine);
/// f of constants known when the kernel is compiled, as the SFP computes it (a NaN wins max and
/// min). fold_unary throws Unsupported for a function it does not fold.
double fold_binary(hw::BinaryFn f, double a, double b);
double fold_unary(hw::UnaryFn f, double x);
/// The two's-complement bits of an integer-valued double (FILL's value for an integer type);
/// Malformed naming `line` when it is out of range.
uint64_t integer_bits(double x, int line);
/// The element type a KTIR type name names (f32, f16, bf16, i64, i32, i8, i1, index).
hw::DType dtype_of(const std::string& name, int line);
/// The shape and element type of `tensor<4x8xf16>`, `memref<...>` or `!ktdp.access_tile<...>`.
std::pair<std::vector<int64_t>, hw::DType> shaped(const std::string& type, int line);
/// The tokens of `o` that follow `word` (an ident or punct) at the top level, or nullptr.
const Token* after(const Op& o, const std::string& word, size_t* index = nullptr);
/// The value names of `o` before its type (its first ':'): "arith.addi %a, %b : index" gives {%a, %b}.
std::vector<std::string> operands(const Op& o);
/// The value names inside `word(...)` (ins, outs): "ins(%a, %b : T, T)" gives {%a, %b}.
std::vector<std::string> group(const Op& o, const std::string& word);
/// The type names inside `word(...)` after its ':'.
std::vector<std::string> group_types(const Op& o, const std::string& word);
/// An attribute of `o` (`key = value`), its alias resolved, or nullptr.
const Token* attribute(const Op& o, const std::string& key, const Module& m);
/// The integers of a `[a, b, ...]` list that follows `word`.
std::vector<int64_t> int_list(const Op& o, const std::string& word);

}  // namespace spyre::compiler::ktir
