// torch_xla_ext's _ext.so reduced to what graph_breaks.account() and collectives.recorded_calls()
// call: it links its own copy of cc/graph_breaks and cc/collectives statically, as _ext does.
#include "cc/collectives/hooks.h"
#include "cc/graph_breaks/hooks.h"

extern "C" void ext_set_hooks_enabled(int enabled) { txe::graph_breaks::SetHooksEnabled(enabled != 0); }
extern "C" long ext_fallback_op_count() {
  return txe::graph_breaks::GlobalLedger().Count(txe::graph_breaks::Kind::kFallbackOp);
}
extern "C" long ext_recorded_all_reduces() {
  return static_cast<long>(txe::collectives::RecordedAllReducesSince(0).size());
}
