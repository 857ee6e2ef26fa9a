// The value graph of a StableHLO function, shared by the analyses that read a program's structure:
// the collectives analysis (argument kinds, tokens, scales; cc/collectives/analysis.h) and the
// rounding-point analysis (where a program rounds to bf16/f16; cc/parity/rounding.h).
//
// The Python side builds it from a module parsed with JAX's MLIR bindings; a torch_xla fork can
// build it from its own MLIR walk. No MLIR dependency here.
//
// Ops are listed in pre-order: an op with regions comes before the ops of its regions, which
// name it as `parent`. A region's block arguments are values too; the op that owns the region
// defines them (`region_args`). A flat graph (every `parent` -1) is the function's top level.
#ifndef TXE_CC_GRAPH_GRAPH_H_
#define TXE_CC_GRAPH_GRAPH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cc/common/status.h"

namespace txe::graph {

struct TensorType {
  std::vector<int64_t> shape;  // empty: a scalar
  std::string element_type;    // MLIR spelling: "f32", "bf16", "i64", ...; "" for a non-tensor
};

struct Op {
  std::string name;               // MLIR op name, e.g. "stablehlo.all_reduce"
  std::vector<int64_t> operands;  // value ids
  std::vector<int64_t> results;   // value ids
  // For ops with a reduction body (all_reduce, reduce_scatter): the one op the body applies,
  // e.g. "stablehlo.add". Empty when there is no body or it is not a single binary op.
  std::string reduction;
  // replica_groups attribute, one vector per group; empty: all replicas in one group.
  std::vector<std::vector<int64_t>> replica_groups;
  // stablehlo.constant whose value is a splat: the element value.
  std::optional<double> splat_value;
  // The op whose region holds this one (an index into Graph::ops); -1 at the function's top level.
  int64_t parent = -1;
  // Block arguments of this op's regions (value ids), region after region.
  std::vector<int64_t> region_args;
  // Attributes an analysis reads, as key/value text (e.g. {"batching_dims", "1"} on a dot_general).
  std::vector<std::pair<std::string, std::string>> attributes;

  // nullptr when absent.
  const std::string* FindAttribute(std::string_view key) const;
};

struct Graph {
  // Indexed by value id. Ids [0, num_args) are the function's arguments, in order.
  std::vector<TensorType> values;
  int64_t num_args = 0;
  std::vector<Op> ops;            // pre-order (see above)
  std::vector<int64_t> returned;  // operands of the function's return
};

// Checks that the graph is well formed: ids in range, each value defined once and before its
// use (region arguments by their op, before the region's ops), parents earlier than their
// children. InvalidArgument naming the op otherwise.
Status Validate(const Graph& graph);

// One use of a value: operand `operand` of op `op`, or position `operand` of the function's
// return when `op` is -1.
struct Use {
  int64_t op;
  int64_t operand;
};

// Def-use chains of a validated graph.
class DefUse {
 public:
  explicit DefUse(const Graph& graph);

  const std::vector<Use>& uses(int64_t value) const { return uses_[value]; }
  // The op defining `value` (-1 for a function argument or a region argument) and which of its
  // results it is.
  int64_t def_op(int64_t value) const { return def_op_[value]; }
  int64_t def_result(int64_t value) const { return def_result_[value]; }

 private:
  std::vector<std::vector<Use>> uses_;
  std::vector<int64_t> def_op_;
  std::vector<int64_t> def_result_;
};

}  // namespace txe::graph

#endif  // TXE_CC_GRAPH_GRAPH_H_
