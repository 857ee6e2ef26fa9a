// The hook API a torch_xla fork calls from its lowering and bridge code:
//
//   #include "cc/graph_breaks/hooks.h"
//   // in a CPU-fallback path:
//   TXE_GB_FALLBACK_OP(c10::toString(op.operator_name()));
//   // around a compile:
//   TXE_GB_SCOPED(kCompile, kXla, graph_hash_hex);
//
// Hooks record into GlobalLedger() only while enabled (SetHooksEnabled, or the Python
// torch_xla_ext.graph_breaks.account() region); disabled, a hook is one relaxed atomic load.
// Each macro interns its file once per call site.
#ifndef TXE_CC_GRAPH_BREAKS_HOOKS_H_
#define TXE_CC_GRAPH_BREAKS_HOOKS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "cc/graph_breaks/ledger.h"

namespace txe::graph_breaks {

// The process-wide ledger the hooks write to; created on first use, never destroyed (hooks may
// run during static destruction of the embedding process).
Ledger& GlobalLedger();

namespace internal {
extern std::atomic<int> hooks_enabled;
}  // namespace internal

inline bool HooksEnabled() { return internal::hooks_enabled.load(std::memory_order_relaxed) > 0; }
// Nested enables count: hooks stay on until every enabler has disabled.
void SetHooksEnabled(bool enabled);

// Free-function hooks (no-ops while disabled).
void OnGraphBreak(std::string_view reason, SourceLocation where, Stage stage = Stage::kDynamo);
void OnFallbackOp(std::string_view aten_op, SourceLocation where = {});
void OnCompile(std::string_view graph_hash, bool cached, int64_t duration_ns, SourceLocation where = {});
void OnExecute(std::string_view graph_hash, int64_t duration_ns, SourceLocation where = {});
void OnTransferToHost(std::string_view what, int64_t duration_ns, SourceLocation where = {});
void OnSync(std::string_view reason, SourceLocation where = {});

// Times its scope and records one event when it ends (if hooks were enabled when it began).
class ScopedEvent {
 public:
  ScopedEvent(Kind kind, Stage stage, std::string_view key, SourceLocation where = {});
  ~ScopedEvent();
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
  // The key when it is only known at the end (e.g. the hash of what was compiled).
  void set_key(std::string_view key) { key_ = key; }

 private:
  bool active_;
  Kind kind_;
  Stage stage_;
  std::string key_;
  SourceLocation where_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace txe::graph_breaks

#define TXE_GB_CONCAT_INNER_(a, b) a##b
#define TXE_GB_CONCAT_(a, b) TXE_GB_CONCAT_INNER_(a, b)

// Records one event of `kind` (a Kind enumerator name, e.g. kGraphBreak) at this call site.
#define TXE_GB_RECORD(kind, stage, key, reason)                                                  \
  do {                                                                                           \
    if (::txe::graph_breaks::HooksEnabled()) {                                                   \
      auto& txe_gb_ledger_ = ::txe::graph_breaks::GlobalLedger();                                \
      static const ::txe::graph_breaks::StringId txe_gb_file_ = txe_gb_ledger_.Intern(__FILE__); \
      txe_gb_ledger_.RecordInterned(::txe::graph_breaks::Kind::kind,                             \
                                    ::txe::graph_breaks::Stage::stage, txe_gb_ledger_.Intern(key), \
                                    txe_gb_ledger_.Intern(reason), txe_gb_file_, __LINE__);      \
    }                                                                                            \
  } while (0)

#define TXE_GB_GRAPH_BREAK(reason) TXE_GB_RECORD(kGraphBreak, kBridge, "", reason)
#define TXE_GB_FALLBACK_OP(aten_op) TXE_GB_RECORD(kFallbackOp, kXla, aten_op, "")
#define TXE_GB_SYNC(reason) TXE_GB_RECORD(kSync, kLazy, "", reason)
// Times the rest of the enclosing scope, e.g. TXE_GB_SCOPED(kCompile, kXla, hash).
#define TXE_GB_SCOPED(kind, stage, key)                                       \
  ::txe::graph_breaks::ScopedEvent TXE_GB_CONCAT_(txe_gb_scoped_, __LINE__)( \
      ::txe::graph_breaks::Kind::kind, ::txe::graph_breaks::Stage::stage, key, {__FILE__, __LINE__})

#endif  // TXE_CC_GRAPH_BREAKS_HOOKS_H_
