#include "examples/fork/fork_lowering.h"

#include <cstdio>
#include <utility>

#include "cc/collectives/hooks.h"
#include "cc/graph_breaks/hooks.h"
#include "cc/jax_call/param_mapping.h"

namespace xla_fork {

// [FORK.md all-reduce]
txe::StatusOr<LoweredAllReduce> LowerAllReduce(const AllReduceOp& op, int64_t world_size) {
  LoweredAllReduce out;
  if (world_size == 1) {
    out.emitted = "clone";  // upstream 2.9: nothing to reduce, and the scale goes with it
    out.applied_scale = 1.0;
  } else {
    out.emitted = op.scale == 1.0 ? "all_reduce" : "all_reduce+multiply";
    out.applied_scale = op.scale;
  }
  // ... emit out.emitted into the graph here ...

  txe::collectives::AllReduceCall call;
  call.reduce = op.reduce;
  call.requested_scale = op.scale;
  call.applied_scale = out.applied_scale;
  call.replica_groups = op.groups;
  call.world_size = world_size;
  call.lowering = out.emitted;
  TXE_ASSIGN_OR_RETURN(out.sequence, txe::collectives::RecordAllReduce(std::move(call)));
  return out;
}
// [end]

namespace {

// FNV-1a over the partition's ops: the stand-in for the hash of the lowered XLA graph.
std::string GraphHash(const std::vector<FxNode>& nodes) {
  uint64_t h = 1469598103934665603ull;
  for (const FxNode& n : nodes) {
    for (char c : n.aten_op + ";") h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

// [FORK.md dynamo-bridge]
txe::StatusOr<BridgeRun> DynamoBridge::Run(const FxGraph& graph) {
  if (graph.nodes.empty()) return txe::InvalidArgumentError("FxGraph has no nodes");
  TXE_GB_RECORD(kFxGraph, kDynamo, std::to_string(graph.nodes.size()), "");
  BridgeRun run;
  // Partition: consecutive XLA-supported nodes form one XLA graph; the others are left to eager
  // (CPU fallback) and split the graph. `order` keeps graph order for execution.
  struct Step {
    bool fallback;
    size_t index;  // into run.fallback_ops or run.partitions
  };
  std::vector<Step> order;
  std::vector<FxNode> pending;
  auto close_partition = [&] {
    if (pending.empty()) return;
    TXE_GB_RECORD(kXlaPartition, kBridge, std::to_string(pending.size()), "");
    Partition p{std::move(pending), ""};
    pending.clear();
    p.graph_hash = GraphHash(p.nodes);
    if (CompileOrHit(p.graph_hash)) {
      ++run.cached_compiles;
    } else {
      ++run.compiles;
    }
    order.push_back({false, run.partitions.size()});
    run.partitions.push_back(std::move(p));
  };
  for (const FxNode& node : graph.nodes) {
    if (xla_ops_.count(node.aten_op)) {
      pending.push_back(node);
      continue;
    }
    close_partition();
    TXE_GB_RECORD(kFallbackNode, kBridge, node.aten_op, node.name);
    order.push_back({true, run.fallback_ops.size()});
    run.fallback_ops.push_back(node.aten_op);
  }
  close_partition();
  for (const Step& step : order) {
    if (step.fallback) {
      TXE_GB_FALLBACK_OP(run.fallback_ops[step.index]);
      // ... at::native::cpu_fallback(op, stack) ...
    } else {
      TXE_GB_SCOPED(kExecute, kXla, run.partitions[step.index].graph_hash);
      // ... execute the compiled partition ...
    }
  }
  return run;
}

bool DynamoBridge::CompileOrHit(const std::string& graph_hash) {
  std::lock_guard<std::mutex> lock(mu_);
  if (compiled_.count(graph_hash)) {
    txe::graph_breaks::OnCompile(graph_hash, /*cached=*/true, /*duration_ns=*/0, {__FILE__, __LINE__});
    return true;
  }
  TXE_GB_SCOPED(kCompile, kXla, graph_hash);  // times the compile below
  // ... xla::PjRtClient::Compile(...) ...
  compiled_.insert(graph_hash);
  return false;
}
// [end]

// [FORK.md call_jax]
txe::StatusOr<std::vector<CallJaxOperand>> LowerCallJax(const CallJaxRequest& request) {
  TXE_ASSIGN_OR_RETURN(txe::jax_call::ParamMapping mapping,
                       txe::jax_call::BuildParamMapping(request.leaves, request.constants,
                                                        request.kept_var_idx, request.hlo_module_proto));
  TXE_RETURN_IF_ERROR(txe::jax_call::CheckOutputs(mapping, request.outputs));
  // One operand per HLO parameter, in parameter order: hoisted constants first, then the kept
  // tensor leaves; unused leaves and statics are not operands at all.
  std::vector<CallJaxOperand> operands;
  for (const txe::jax_call::ParamSource& s : mapping.sources) {
    if (s.kind == txe::jax_call::ParamSource::Kind::kConstant) {
      operands.push_back({true, s.index, "const[" + std::to_string(s.index) + "]"});
    } else {
      operands.push_back({false, s.index, request.leaves[s.index].path});
    }
  }
  return operands;
}
// [end]

}  // namespace xla_fork
