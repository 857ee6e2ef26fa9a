// A stand-in for the three places in a torch_xla fork that call torch_xla_ext's C++ hooks:
//
//   * its all-reduce lowering (torch_xla's BuildAllReduce)        -> cc/collectives/hooks.h
//   * its dynamo bridge: CPU-fallback partitioning, then compile
//     and execute of each XLA partition                             -> cc/graph_breaks/hooks.h
//   * its call_jax lowering (the user computation JAX produced)    -> cc/jax_call/param_mapping.h
//
// It uses only the public headers and the //cc/<component> targets, exactly as a fork does
// through @txe//cc/<component>. docs/FORK.md quotes this code; keep the two in sync.
#ifndef TXE_EXAMPLES_FORK_FORK_LOWERING_H_
#define TXE_EXAMPLES_FORK_FORK_LOWERING_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cc/common/status.h"
#include "cc/jax_call/param_mapping.h"

namespace xla_fork {

// ---- 1. all-reduce lowering ---------------------------------------------------------------

struct AllReduceOp {
  std::string reduce = "sum";  // "sum", "max", "min", "mul", "and", "or"
  double scale = 1.0;
  std::vector<std::vector<int64_t>> groups;  // empty: all replicas
};

// What the lowering emitted, as a fork's IR builder would see it.
struct LoweredAllReduce {
  std::string emitted;   // "all_reduce", "all_reduce+multiply" or "clone"
  double applied_scale = 1.0;
  int64_t sequence = -1; // the hook's sequence number for this call
};

// Lowers one all-reduce over `world_size` replicas and records it through
// txe::collectives::RecordAllReduce. Like upstream torch_xla 2.9, a single replica lowers to a
// clone and the scale is dropped: the hook records requested 0.25 next to applied 1.0, which is
// how the drop becomes visible to tools.
txe::StatusOr<LoweredAllReduce> LowerAllReduce(const AllReduceOp& op, int64_t world_size);

// ---- 2. dynamo bridge ----------------------------------------------------------------------

struct FxNode {
  std::string name;     // "add_1"
  std::string aten_op;  // "aten::add.Tensor"
};

struct FxGraph {
  std::vector<FxNode> nodes;
};

// One XLA partition of an FX graph: the consecutive nodes XLA supports.
struct Partition {
  std::vector<FxNode> nodes;
  std::string graph_hash;  // hex, the compile cache key
};

struct BridgeRun {
  std::vector<Partition> partitions;
  std::vector<std::string> fallback_ops;  // the nodes left to eager (CPU fallback), in order
  int64_t compiles = 0;                   // cache misses in this run
  int64_t cached_compiles = 0;
};

// The bridge's per-process state: which aten ops lower to XLA, and the compile cache.
// Thread-safe (a fork's bridge runs on whichever thread Dynamo calls the backend from).
class DynamoBridge {
 public:
  explicit DynamoBridge(std::set<std::string> xla_ops) : xla_ops_(std::move(xla_ops)) {}

  // Splits `graph` at the ops XLA does not support (they run eagerly on the CPU), compiles each
  // XLA partition unless it is cached, and executes everything in order.
  txe::StatusOr<BridgeRun> Run(const FxGraph& graph);

 private:
  // Returns true on a cache hit.
  bool CompileOrHit(const std::string& graph_hash);

  const std::set<std::string> xla_ops_;
  std::mutex mu_;
  std::set<std::string> compiled_;  // graph hashes in the compile cache
};

// ---- 3. call_jax lowering ------------------------------------------------------------------

// What torch_xla's call_jax hands the lowering: the HloModuleProto JAX produced and what JAX
// reported while lowering it (kept_var_idx, hoisted constants), plus the caller's pytree leaves.
struct CallJaxRequest {
  std::string hlo_module_proto;                     // serialized xla::HloModuleProto
  std::vector<txe::jax_call::Leaf> leaves;          // flattened inputs, jax keystr paths
  std::vector<txe::jax_call::ConstantSpec> constants;
  std::vector<int64_t> kept_var_idx;
  std::vector<txe::jax_call::Leaf> outputs;         // what the traced function returned
};

// Where each operand of the emitted user computation comes from: one entry per HLO parameter.
struct CallJaxOperand {
  bool is_constant = false;
  int64_t index = 0;   // leaf index, or hoisted-constant index
  std::string path;    // leaf path ("args[0]['w']") or "const[k]"
};

// Checks the module against the request before any tensor is wired to a parameter; the error
// names the pytree path of the offending leaf (or output).
txe::StatusOr<std::vector<CallJaxOperand>> LowerCallJax(const CallJaxRequest& request);

}  // namespace xla_fork

#endif  // TXE_EXAMPLES_FORK_FORK_LOWERING_H_
