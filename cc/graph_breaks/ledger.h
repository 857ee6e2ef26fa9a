// A graph-break ledger: where a torch_xla program leaves the one-big-graph path (Dynamo graph
// breaks, CPU-fallback partitions, host round trips) and what that costs in XLA compiles,
// executions and transfers.
//
// Two views of the same events:
//   * aggregates that never drop: a count and total/max duration per kind (striped atomics), and
//     per (kind, stage, key, reason, file:line) — the op that fell back, the graph hash that was
//     compiled, the user frame of a break. Memory is bounded by the number of distinct keys
//     (capped by LedgerOptions, the excess folds into an "<overflow>" key, never lost).
//   * a bounded ring of the most recent events, in order, for "what happened just before".
//
// Recording is safe from any thread and cheap enough for per-op hooks: a few relaxed atomics,
// one uncontended striped lock and a seqlock'd ring slot. Strings are interned once; callers on a
// hot path keep the ids (see hooks.h for the call-site macros a torch_xla fork uses).
#ifndef TXE_CC_GRAPH_BREAKS_LEDGER_H_
#define TXE_CC_GRAPH_BREAKS_LEDGER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cc/common/status.h"

namespace txe::graph_breaks {

// What happened. The names (KindName) are the report's field names.
enum class Kind : uint8_t {
  kFxGraph = 0,          // Dynamo handed an FX graph to the backend
  kGraphBreak = 1,       // Dynamo stopped tracing (reason + user frame)
  kRecompile = 2,        // a guard failed and Dynamo traced the frame again (e.g. new shape)
  kXlaPartition = 3,     // one XLA graph of an FX graph after the CPU-fallback split
  kFallbackNode = 4,     // an FX node the bridge left to eager (its aten op is the key)
  kFallbackOp = 5,       // an aten op executed through the CPU fallback at run time
  kCompile = 6,          // an XLA compile that missed the cache
  kCachedCompile = 7,    // a compile request served from the cache
  kExecute = 8,          // an XLA execution
  kTransferToHost = 9,   // a device -> host transfer
  kSync = 10,            // a lazy-tensor sync (mark_step / torch_xla.sync)
  kForcedExecution = 11, // an execution not caused by a sync (a host read forced it)
};
inline constexpr int kNumKinds = 12;

// Which layer saw it.
enum class Stage : uint8_t { kDynamo = 0, kBridge = 1, kXla = 2, kLazy = 3, kUser = 4 };
inline constexpr int kNumStages = 5;

const char* KindName(Kind kind);
const char* StageName(Stage stage);
StatusOr<Kind> KindFromName(std::string_view name);
StatusOr<Stage> StageFromName(std::string_view name);

// Where in the source an event comes from; `file` must outlive the call only (it is interned).
struct SourceLocation {
  std::string_view file;
  int line = 0;
};

// Which replica an event belongs to when one process drives several devices (torch_xla's
// thread-per-device replicas, e.g. CPU_NUM_DEVICES): its device ordinal, or kNoReplica for
// process-wide events. Ordinals above kMaxReplica are recorded as kNoReplica.
inline constexpr int kNoReplica = -1;
inline constexpr int kMaxReplica = 0xfffe;

using StringId = uint32_t;
inline constexpr StringId kEmptyStringId = 0;
inline constexpr StringId kOverflowStringId = 1;  // "<overflow>" once max_strings is reached

struct LedgerOptions {
  size_t ring_capacity = 4096;        // recent events kept in order
  size_t max_strings = 1 << 16;       // distinct interned strings
  size_t max_aggregates = 1 << 16;    // distinct (kind, stage, key, reason, site) rows
};

// What was recorded and where: the fields an event and an aggregate row share.
struct EventSite {
  Kind kind = Kind::kFxGraph;
  Stage stage = Stage::kDynamo;
  std::string key;
  std::string reason;
  std::string file;
  int line = 0;
  int replica = kNoReplica;
  int64_t count = 0;  // occurrences (an event's own count; a row's sum)
};

struct Event : EventSite {
  uint64_t seq = 0;  // 0-based position in the ledger's history
  int64_t duration_ns = 0;
  int64_t timestamp_ns = 0;  // steady clock, relative to the ledger's creation (epoch_ns())
  uint32_t thread = 0;       // small per-process thread index
};

struct Aggregate : EventSite {
  int64_t total_ns = 0;
  int64_t max_ns = 0;
};

struct KindTotals {
  std::array<int64_t, kNumKinds> count{};
  std::array<int64_t, kNumKinds> total_ns{};
};

class Ledger {
 public:
  static StatusOr<std::unique_ptr<Ledger>> Create(const LedgerOptions& options = {});
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Interns `s` (thread-safe; the same string always gets the same id). Past max_strings every
  // new string maps to kOverflowStringId.
  StringId Intern(std::string_view s);
  std::string Lookup(StringId id) const;
  // Strings interned so far (ids below this are valid), including the two reserved ids.
  size_t num_strings() const;

  // Records `count` occurrences taking `duration_ns` in total. Events of different replicas
  // aggregate in different rows.
  void Record(Kind kind, Stage stage, std::string_view key, std::string_view reason = {},
              SourceLocation where = {}, int64_t duration_ns = 0, int64_t count = 1,
              int replica = kNoReplica);
  // The hot path: ids from Intern().
  void RecordInterned(Kind kind, Stage stage, StringId key, StringId reason, StringId file, int line,
                      int64_t duration_ns = 0, int64_t count = 1, int replica = kNoReplica);

  // Aggregates (exact, never dropped).
  int64_t Count(Kind kind) const;
  int64_t TotalNs(Kind kind) const;
  KindTotals Totals() const;
  std::vector<Aggregate> Aggregates() const;  // merged over stripes, sorted by kind then count desc

  // The ring: the most recent events, oldest first. An event being overwritten while read is
  // skipped, never returned torn.
  std::vector<Event> RecentEvents() const;
  uint64_t events_recorded() const { return next_seq_.load(std::memory_order_acquire); }
  size_t ring_capacity() const { return ring_capacity_; }
  // The steady clock (CLOCK_MONOTONIC on Linux) at creation, in ns: event timestamps are
  // relative to it.
  int64_t epoch_ns() const { return epoch_ns_; }

  // Bytes held (ring, interned strings, aggregate rows); bounded by the options whatever the
  // number of events.
  size_t MemoryBytes() const;

 private:
  struct Stripe;
  struct Slot;
  struct AggKey {
    uint64_t a = 0;  // kind | stage | replica + 1 | line
    uint64_t b = 0;  // key | reason
    uint32_t file = 0;
    bool operator==(const AggKey& o) const { return a == o.a && b == o.b && file == o.file; }
  };
  struct AggKeyHash {
    size_t operator()(const AggKey& k) const;
  };
  struct AggValue {
    int64_t count = 0;
    int64_t total_ns = 0;
    int64_t max_ns = 0;
  };

  explicit Ledger(const LedgerOptions& options);
  Stripe& MyStripe() const;
  void WriteRing(uint64_t seq, const std::array<uint64_t, 6>& words);

  const size_t ring_capacity_;
  const size_t max_strings_;
  const size_t max_aggregates_;
  const int64_t epoch_ns_;

  mutable std::shared_mutex strings_mu_;
  std::deque<std::string> strings_;                            // stable storage, id = index
  std::unordered_map<std::string_view, StringId> string_ids_;  // views into strings_
  size_t string_bytes_ = 0;

  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<size_t> rows_{0};  // aggregate rows over all stripes, capped by max_aggregates
  std::unique_ptr<Slot[]> ring_;
  std::atomic<uint64_t> next_seq_{0};
};

}  // namespace txe::graph_breaks

#endif  // TXE_CC_GRAPH_BREAKS_LEDGER_H_
