#include "cc/graph_breaks/hooks.h"

namespace txe::graph_breaks {

namespace internal {
std::atomic<int> hooks_enabled{0};
}  // namespace internal

Ledger& GlobalLedger() {
  static Ledger* const ledger = Ledger::Create().value().release();  // default options are valid
  return *ledger;
}

void SetHooksEnabled(bool enabled) {
  if (enabled) {
    internal::hooks_enabled.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  int cur = internal::hooks_enabled.load(std::memory_order_relaxed);
  while (cur > 0 && !internal::hooks_enabled.compare_exchange_weak(cur, cur - 1, std::memory_order_relaxed)) {
  }
}

void OnGraphBreak(std::string_view reason, SourceLocation where, Stage stage) {
  if (HooksEnabled()) GlobalLedger().Record(Kind::kGraphBreak, stage, {}, reason, where);
}

void OnFallbackOp(std::string_view aten_op, SourceLocation where) {
  if (HooksEnabled()) GlobalLedger().Record(Kind::kFallbackOp, Stage::kXla, aten_op, {}, where);
}

void OnCompile(std::string_view graph_hash, bool cached, int64_t duration_ns, SourceLocation where) {
  if (HooksEnabled()) {
    GlobalLedger().Record(cached ? Kind::kCachedCompile : Kind::kCompile, Stage::kXla, graph_hash, {}, where,
                          duration_ns);
  }
}

void OnExecute(std::string_view graph_hash, int64_t duration_ns, SourceLocation where) {
  if (HooksEnabled()) GlobalLedger().Record(Kind::kExecute, Stage::kXla, graph_hash, {}, where, duration_ns);
}

void OnTransferToHost(std::string_view what, int64_t duration_ns, SourceLocation where) {
  if (HooksEnabled()) GlobalLedger().Record(Kind::kTransferToHost, Stage::kXla, what, {}, where, duration_ns);
}

void OnSync(std::string_view reason, SourceLocation where) {
  if (HooksEnabled()) GlobalLedger().Record(Kind::kSync, Stage::kLazy, {}, reason, where);
}

ScopedEvent::ScopedEvent(Kind kind, Stage stage, std::string_view key, SourceLocation where)
    : active_(HooksEnabled()), kind_(kind), stage_(stage), where_(where) {
  if (active_) {
    key_ = key;
    start_ = std::chrono::steady_clock::now();
  }
}

ScopedEvent::~ScopedEvent() {
  if (!active_) return;
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  GlobalLedger().Record(kind_, stage_, key_, {}, where_, ns);
}

}  // namespace txe::graph_breaks
