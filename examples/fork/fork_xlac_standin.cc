// The fork's extension module (its _XLAC.so) reduced to a few entry points; it links its own
// copy of cc/ statically, as a fork that vendors @txe//cc/... does.
#include "cc/collectives/hooks.h"
#include "cc/graph_breaks/hooks.h"
#include "examples/fork/fork_lowering.h"

extern "C" int fork_run_bridge() {
  xla_fork::DynamoBridge bridge({"aten::mm", "aten::add.Tensor"});
  auto run = bridge.Run(xla_fork::FxGraph{{{"mm", "aten::mm"}, {"digamma", "aten::digamma"}, {"add", "aten::add.Tensor"}}});
  return run.ok() ? 0 : 1;
}

extern "C" int fork_lower_all_reduce() { return xla_fork::LowerAllReduce({"sum", 0.25, {}}, 1).ok() ? 0 : 1; }

// The fork's own view of its copy of the hook state.
extern "C" void fork_set_hooks_enabled(int enabled) { txe::graph_breaks::SetHooksEnabled(enabled != 0); }
extern "C" long fork_fallback_op_count() {
  return txe::graph_breaks::GlobalLedger().Count(txe::graph_breaks::Kind::kFallbackOp);
}
extern "C" long fork_recorded_all_reduces() {
  return static_cast<long>(txe::collectives::RecordedAllReducesSince(0).size());
}
