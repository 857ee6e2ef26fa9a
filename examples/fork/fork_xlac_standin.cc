// The fork's extension module (its _XLAC.so) reduced to a few entry points over its runtime and
// CPU fallback (examples/fork/fork_lowering.h), whichever way it links cc/.
#include <memory>

#include "cc/collectives/hooks.h"
#include "cc/graph_breaks/hooks.h"
#include "examples/fork/fork_lowering.h"

// One op through the CPU fallback, then one sharded tensor brought to the host (ReplicateShardedData:
// one compile and one execution of its identity graph, one transfer).
extern "C" int fork_run_fallback_and_graph() {
  xla_fork::Stack stack;
  xla_fork::xla_fallback({"aten::digamma"}, &stack);
  xla_fork::PjRtComputationClient client(2);
  auto sharded = std::make_shared<xla_fork::Data>(xla_fork::Data{"SPMD:0", {4}, /*sharded=*/true});
  return client.TransferFromDevice({sharded}).ok() ? 0 : 1;
}

// One compile of a module with a scaled all-reduce on one device: the typing records it.
extern "C" int fork_compile_all_reduce() {
  xla_fork::PjRtComputationClient client(1);
  std::vector<xla_fork::CompileInstance> instances;
  instances.push_back({xla_fork::AllReduceModule("scaled", 4, "add", 0.25), "TT:0", false});
  return client.Compile(std::move(instances)).ok() ? 0 : 1;
}

// The fork's own view of its copy of the hook state.
extern "C" void fork_set_hooks_enabled(int enabled) { txe::graph_breaks::SetHooksEnabled(enabled != 0); }
extern "C" long fork_fallback_op_count() {
  return txe::graph_breaks::GlobalLedger().Count(txe::graph_breaks::Kind::kFallbackOp);
}
extern "C" long fork_recorded_all_reduces() {
  return static_cast<long>(txe::collectives::RecordedAllReducesSince(0).size());
}
