// The part of a StableHLO module the collective analysis needs: `main`'s arguments and its
// top-level ops as a value graph. The Python side builds it from a module parsed with JAX's MLIR
// bindings; a torch_xla fork can build it from its own MLIR walk. No MLIR dependency here.
#ifndef TXE_CC_COLLECTIVES_GRAPH_H_
#define TXE_CC_COLLECTIVES_GRAPH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace txe::collectives {

struct TensorType {
  std::vector<int64_t> shape;  // empty: a scalar
  std::string element_type;    // MLIR spelling: "f32", "bf16", "i64", ...
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
};

struct Graph {
  // Indexed by value id. Ids [0, num_args) are main's arguments, in order.
  std::vector<TensorType> values;
  int64_t num_args = 0;
  std::vector<Op> ops;            // main's top-level ops in program order
  std::vector<int64_t> returned;  // operands of main's return
};

}  // namespace txe::collectives

#endif  // TXE_CC_COLLECTIVES_GRAPH_H_
