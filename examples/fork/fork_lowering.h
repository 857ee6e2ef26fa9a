// A stand-in for the places in a torch_xla fork that call torch_xla_ext's C++ hooks, with the
// signatures of the live fork (tenstorrent/pytorch-xla, which leaves xla_graph_executor.cpp as
// upstream has it and changes the runtime):
//
//   * torch_xla/csrc/runtime/stablehlo_helper.cpp   ConvertHloToStableHlo(proto, mlir_module)
//   * torch_xla/csrc/runtime/pjrt_computation_client.cpp
//       PjRtComputationClient::Compile               -> all-reduce typing (cc/collectives) right
//                                                       after ConvertHloToStableHlo, and compile
//                                                       accounting (cc/graph_breaks/hooks.h)
//       PjRtComputationClient::ExecuteComputation    -> execute accounting
//       PjRtComputationClient::ReplicateShardedData  -> compiles through Compile, so its uncached
//                                                       compile per sharded .to("cpu") shows
//                                                       (pytorch/xla#9751)
//   * torch_xla/csrc/aten_fallback.cpp               xla_fallback(op, stack): the CPU fallback the
//                                                       dynamo bridge leaves ops to
//   * the call_jax lowering (the user computation JAX produced) -> cc/jax_call/param_mapping.h
//
// Types the example cannot have (mlir::ModuleOp, xla::XlaComputation, PjRt buffers,
// c10::OperatorHandle, absl::Span) are small stand-ins named after them; xla::HloModuleProto is
// XLA's own message (//third_party/xla). It uses only the public headers and the //cc/<component>
// targets, exactly as a fork does through @txe//cc/<component>. docs/FORK.md quotes this code.
#ifndef TXE_EXAMPLES_FORK_FORK_LOWERING_H_
#define TXE_EXAMPLES_FORK_FORK_LOWERING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cc/common/status.h"
#include "cc/graph/graph.h"
#include "cc/jax_call/param_mapping.h"
#include "xla/service/hlo.pb.h"

namespace xla_fork {

// ---- runtime/stablehlo_helper.cpp ---------------------------------------------------------------

// The fork's mlir::ModuleOp, as torch_xla_ext reads it: `main`'s value graph (cc/graph/graph.h),
// which the fork fills from a walk of its MLIR module.
struct ModuleOp {
  txe::graph::Graph main;
};

// `void ConvertHloToStableHlo(const xla::HloModuleProto* proto, mlir::ModuleOp* mlir_module)`:
// HLO -> MHLO -> StableHLO in the fork (XLA's passes; the fork's ConvertStableHloToSdy may follow).
// The stand-in converts the entry computation's instructions it knows (parameter, constant,
// broadcast, convert, add, multiply, all-reduce, get-tuple-element, tuple) into their StableHLO
// ops; anything else is InvalidArgument naming the instruction. (The fork's returns void and
// XLA_CHECKs.)
txe::Status ConvertHloToStableHlo(const xla::HloModuleProto* proto, ModuleOp* mlir_module);

// Each all-reduce of a converted module, typed by cc/collectives' analysis (reduce, replica
// groups, token operand, the scale multiplied in after it) and recorded through
// txe::collectives::RecordAllReduce.
txe::Status TypeAllReduces(const ModuleOp& module, int64_t world_size);

// ---- runtime/pjrt_computation_client.cpp --------------------------------------------------------

// ComputationClient::CompileInstance (its computation is an xla::XlaComputation; proto() here).
struct CompileInstance {
  xla::HloModuleProto computation;
  std::string compilation_device;
  bool is_sharded = false;
};

// ComputationClient::Computation / PjRtComputation: what Compile returns.
struct Computation {
  std::string name;  // the HLO module's name
  std::string hash;  // a fingerprint of the HLO module (the accounting key, with the name)
  ModuleOp module;   // what was compiled (the fork: the StableHLO module handed to CompileAndLoad)
};
using ComputationPtr = std::shared_ptr<Computation>;

// ComputationClient::Data: PjRtData (one buffer) or PjRtShardedData (shards and an OpSharding).
struct Data {
  std::string device;
  std::vector<int64_t> shape;
  bool sharded = false;  // shards over the devices, not replicated
};
using DataPtr = std::shared_ptr<Data>;

struct ExecuteComputationOptions {
  bool eager_mode = false;
};

class PjRtComputationClient {
 public:
  explicit PjRtComputationClient(int64_t device_count) : device_count_(device_count) {}

  // std::vector<ComputationPtr> Compile(std::vector<CompileInstance> instances). (The fork throws
  // a Python ValueError where the stand-in returns a Status.)
  txe::StatusOr<std::vector<ComputationPtr>> Compile(std::vector<CompileInstance> instances);

  // std::vector<DataPtr> ExecuteComputation(const Computation&, absl::Span<const DataPtr>
  // arguments, const std::string& device, const ExecuteComputationOptions&).
  std::vector<DataPtr> ExecuteComputation(const Computation& computation, const std::vector<DataPtr>& arguments,
                                          const std::string& device, const ExecuteComputationOptions& options);

  // std::shared_ptr<PjRtData> ReplicateShardedData(const DataPtr& handle): a sharded handle is
  // gathered by compiling and running an identity graph whose output is replicated.
  txe::StatusOr<DataPtr> ReplicateShardedData(const DataPtr& handle);

  // What `tensor.to("cpu")` reaches: each handle replicated (above), then copied to the host.
  txe::StatusOr<std::vector<DataPtr>> TransferFromDevice(const std::vector<DataPtr>& handles);

  std::string GetDefaultDevice() const { return "TT:0"; }
  int64_t device_count() const { return device_count_; }

 private:
  const int64_t device_count_;
};

// ---- aten_fallback.cpp --------------------------------------------------------------------------

// c10::OperatorHandle and torch::jit::Stack, reduced to what the fallback reads.
struct OperatorHandle {
  std::string operator_name;  // c10::toString(op.operator_name()), e.g. "aten::digamma"
};
struct Stack {};

// `void xla_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack)`: the boxed kernel
// of every op without an XLA lowering (what the dynamo bridge's partitioner leaves to eager runs
// here too), before at::native::cpu_fallback.
void xla_fallback(const OperatorHandle& op, Stack* stack);

// ---- the call_jax lowering ----------------------------------------------------------------------

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

// ---- test support -------------------------------------------------------------------------------

// An HloModuleProto `name`: f32[n] x, f32[] token -> all-reduce(x, token) over `groups` with
// `reduction` ("add", "maximum", ...), then times a broadcast constant `scale` unless it is 1 (as
// torch_xla lowers xm.all_reduce with a scale).
xla::HloModuleProto AllReduceModule(const std::string& name, int64_t n, const std::string& reduction, double scale,
                                    const std::vector<std::vector<int64_t>>& groups = {});

}  // namespace xla_fork

#endif  // TXE_EXAMPLES_FORK_FORK_LOWERING_H_
