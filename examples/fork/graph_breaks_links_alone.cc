// Links only //cc/graph_breaks (and its //cc/common:status): the call-site macros record into
// GlobalLedger() while enabled and cost one atomic load while not.
#include <cstdio>

#include "cc/graph_breaks/hooks.h"

namespace gb = txe::graph_breaks;

int main() {
  TXE_GB_FALLBACK_OP("aten::digamma");  // disabled: not recorded
  gb::SetHooksEnabled(true);
  TXE_GB_FALLBACK_OP("aten::digamma");
  { TXE_GB_SCOPED(kCompile, kXla, "0123abcd"); }
  gb::SetHooksEnabled(false);
  const int64_t fallbacks = gb::GlobalLedger().Count(gb::Kind::kFallbackOp);
  const int64_t compiles = gb::GlobalLedger().Count(gb::Kind::kCompile);
  if (fallbacks != 1 || compiles != 1) {
    std::fprintf(stderr, "fallback_op %lld, compile %lld; expected 1 and 1\n", static_cast<long long>(fallbacks),
                 static_cast<long long>(compiles));
    return 1;
  }
  std::printf("graph_breaks: fallback_op=1 compile=1\n");
  return 0;
}
