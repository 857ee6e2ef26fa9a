#include "cc/graph_breaks/ledger.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

namespace txe::graph_breaks {
namespace {

// Stripes spread writers over cache lines; a thread always uses the same one, so its own
// updates never contend with another thread unless more threads than stripes are recording.
constexpr int kNumStripes = 16;

constexpr const char* kKindNames[kNumKinds] = {
    "fx_graph",     "graph_break", "recompile", "xla_partition",    "fallback_node", "fallback_op",
    "compile",      "cached_compile", "execute", "transfer_to_host", "sync",          "forced_execution",
};
constexpr const char* kStageNames[kNumStages] = {"dynamo", "bridge", "xla", "lazy", "user"};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A replica as the 16 bits stored in keys and ring words: 0 for kNoReplica (or out of range).
uint64_t ReplicaBits(int replica) {
  return replica >= 0 && replica <= kMaxReplica ? static_cast<uint64_t>(replica + 1) : 0;
}

uint32_t ThreadIndex() {
  static std::atomic<uint32_t> next{0};
  thread_local const uint32_t index = next.fetch_add(1, std::memory_order_relaxed);
  return index;
}

}  // namespace

const char* KindName(Kind kind) {
  int k = static_cast<int>(kind);
  return k >= 0 && k < kNumKinds ? kKindNames[k] : "unknown";
}

const char* StageName(Stage stage) {
  int s = static_cast<int>(stage);
  return s >= 0 && s < kNumStages ? kStageNames[s] : "unknown";
}

StatusOr<Kind> KindFromName(std::string_view name) {
  for (int k = 0; k < kNumKinds; ++k) {
    if (name == kKindNames[k]) return static_cast<Kind>(k);
  }
  return InvalidArgumentError("unknown event kind '" + std::string(name) + "'");
}

StatusOr<Stage> StageFromName(std::string_view name) {
  for (int s = 0; s < kNumStages; ++s) {
    if (name == kStageNames[s]) return static_cast<Stage>(s);
  }
  return InvalidArgumentError("unknown stage '" + std::string(name) + "'");
}

struct alignas(64) Ledger::Stripe {
  std::array<std::atomic<int64_t>, kNumKinds> count{};
  std::array<std::atomic<int64_t>, kNumKinds> total_ns{};
  std::mutex mu;
  std::unordered_map<AggKey, AggValue, AggKeyHash> rows;
};

// A seqlock'd ring slot. version: 0 empty, 2*seq+1 being written, 2*seq+2 holds event `seq`.
// The payload words are atomics so a reader racing a writer is well defined; the version check
// throws such reads away.
struct alignas(64) Ledger::Slot {
  std::atomic<uint64_t> version{0};
  std::array<std::atomic<uint64_t>, 6> words{};
};

size_t Ledger::AggKeyHash::operator()(const AggKey& k) const {
  uint64_t h = k.a * 0x9E3779B97F4A7C15ull;
  h ^= k.b + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
  h ^= static_cast<uint64_t>(k.file) * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
  return static_cast<size_t>(h);
}

StatusOr<std::unique_ptr<Ledger>> Ledger::Create(const LedgerOptions& options) {
  if (options.ring_capacity == 0) return InvalidArgumentError("ring_capacity must be >= 1, got 0");
  if (options.ring_capacity > (size_t{1} << 26)) {
    return InvalidArgumentError("ring_capacity must be <= 2^26, got " + std::to_string(options.ring_capacity));
  }
  if (options.max_strings < 2) {
    return InvalidArgumentError("max_strings must be >= 2, got " + std::to_string(options.max_strings));
  }
  if (options.max_aggregates < static_cast<size_t>(kNumStripes) * kNumKinds * kNumStages) {
    // Below this the overflow rows themselves might not fit.
    return InvalidArgumentError("max_aggregates must be >= " +
                                std::to_string(kNumStripes * kNumKinds * kNumStages) + ", got " +
                                std::to_string(options.max_aggregates));
  }
  return std::unique_ptr<Ledger>(new Ledger(options));
}

Ledger::Ledger(const LedgerOptions& options)
    : ring_capacity_(options.ring_capacity),
      max_strings_(options.max_strings),
      max_aggregates_(options.max_aggregates),
      epoch_ns_(NowNs()),
      stripes_(new Stripe[kNumStripes]),
      ring_(new Slot[options.ring_capacity]) {
  strings_.emplace_back("");
  strings_.emplace_back("<overflow>");
  string_ids_.emplace(strings_[0], kEmptyStringId);
  string_ids_.emplace(strings_[1], kOverflowStringId);
}

Ledger::~Ledger() = default;

StringId Ledger::Intern(std::string_view s) {
  if (s.empty()) return kEmptyStringId;
  {
    std::shared_lock<std::shared_mutex> lock(strings_mu_);
    auto it = string_ids_.find(s);
    if (it != string_ids_.end()) return it->second;
  }
  std::unique_lock<std::shared_mutex> lock(strings_mu_);
  auto it = string_ids_.find(s);
  if (it != string_ids_.end()) return it->second;
  if (strings_.size() >= max_strings_) return kOverflowStringId;
  StringId id = static_cast<StringId>(strings_.size());
  strings_.emplace_back(s);
  string_bytes_ += s.size();
  string_ids_.emplace(strings_.back(), id);
  return id;
}

std::string Ledger::Lookup(StringId id) const {
  std::shared_lock<std::shared_mutex> lock(strings_mu_);
  return id < strings_.size() ? strings_[id] : std::string("<bad id>");
}

size_t Ledger::num_strings() const {
  std::shared_lock<std::shared_mutex> lock(strings_mu_);
  return strings_.size();
}

Ledger::Stripe& Ledger::MyStripe() const { return stripes_[ThreadIndex() % kNumStripes]; }

void Ledger::Record(Kind kind, Stage stage, std::string_view key, std::string_view reason,
                    SourceLocation where, int64_t duration_ns, int64_t count, int replica) {
  RecordInterned(kind, stage, Intern(key), Intern(reason), Intern(where.file), where.line, duration_ns,
                 count, replica);
}

void Ledger::RecordInterned(Kind kind, Stage stage, StringId key, StringId reason, StringId file,
                            int line, int64_t duration_ns, int64_t count, int replica) {
  const int k = static_cast<int>(kind);
  if (k < 0 || k >= kNumKinds || static_cast<int>(stage) >= kNumStages) return;
  Stripe& stripe = MyStripe();
  stripe.count[k].fetch_add(count, std::memory_order_relaxed);
  stripe.total_ns[k].fetch_add(duration_ns, std::memory_order_relaxed);

  const uint64_t replica_bits = ReplicaBits(replica);
  const uint64_t head =
      (static_cast<uint64_t>(k) << 56) | (static_cast<uint64_t>(stage) << 48) | (replica_bits << 32);
  AggKey agg{head | static_cast<uint32_t>(line), (static_cast<uint64_t>(key) << 32) | reason, file};
  {
    std::lock_guard<std::mutex> lock(stripe.mu);
    auto it = stripe.rows.find(agg);
    if (it == stripe.rows.end()) {
      if (rows_.fetch_add(1, std::memory_order_relaxed) >= max_aggregates_) {
        rows_.fetch_sub(1, std::memory_order_relaxed);
        // Full: the occurrence still counts, under an overflow row of its kind and stage.
        agg = AggKey{head, (static_cast<uint64_t>(kOverflowStringId) << 32) | kOverflowStringId,
                     kOverflowStringId};
        it = stripe.rows.find(agg);
        if (it == stripe.rows.end()) it = stripe.rows.emplace(agg, AggValue{}).first;
      } else {
        it = stripe.rows.emplace(agg, AggValue{}).first;
      }
    }
    AggValue& v = it->second;
    v.count += count;
    v.total_ns += duration_ns;
    v.max_ns = std::max(v.max_ns, duration_ns);
  }

  const uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  WriteRing(seq, {static_cast<uint64_t>(k) | (static_cast<uint64_t>(stage) << 8) | (replica_bits << 16) |
                      (static_cast<uint64_t>(static_cast<uint32_t>(line)) << 32),
                  (static_cast<uint64_t>(key) << 32) | reason,
                  (static_cast<uint64_t>(file) << 32) | ThreadIndex(), static_cast<uint64_t>(duration_ns),
                  static_cast<uint64_t>(NowNs() - epoch_ns_), static_cast<uint64_t>(count)});
}

void Ledger::WriteRing(uint64_t seq, const std::array<uint64_t, 6>& words) {
  Slot& slot = ring_[seq % ring_capacity_];
  const uint64_t writing = 2 * seq + 1;
  uint64_t cur = slot.version.load(std::memory_order_relaxed);
  for (;;) {
    // Another writer mid-write (the ring wrapped during its write), or a newer event already
    // landed: the ring is "recent events", so this one yields. Aggregates already hold it.
    if ((cur & 1) || cur > writing) return;
    if (slot.version.compare_exchange_weak(cur, writing, std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
      break;
    }
  }
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t i = 0; i < words.size(); ++i) slot.words[i].store(words[i], std::memory_order_relaxed);
  slot.version.store(writing + 1, std::memory_order_release);
}

int64_t Ledger::Count(Kind kind) const {
  int64_t n = 0;
  for (int s = 0; s < kNumStripes; ++s) {
    n += stripes_[s].count[static_cast<int>(kind)].load(std::memory_order_relaxed);
  }
  return n;
}

int64_t Ledger::TotalNs(Kind kind) const {
  int64_t n = 0;
  for (int s = 0; s < kNumStripes; ++s) {
    n += stripes_[s].total_ns[static_cast<int>(kind)].load(std::memory_order_relaxed);
  }
  return n;
}

KindTotals Ledger::Totals() const {
  KindTotals t;
  for (int k = 0; k < kNumKinds; ++k) {
    t.count[k] = Count(static_cast<Kind>(k));
    t.total_ns[k] = TotalNs(static_cast<Kind>(k));
  }
  return t;
}

std::vector<Aggregate> Ledger::Aggregates() const {
  std::unordered_map<AggKey, AggValue, AggKeyHash> merged;
  for (int s = 0; s < kNumStripes; ++s) {
    std::lock_guard<std::mutex> lock(stripes_[s].mu);
    for (const auto& [key, v] : stripes_[s].rows) {
      AggValue& m = merged[key];
      m.count += v.count;
      m.total_ns += v.total_ns;
      m.max_ns = std::max(m.max_ns, v.max_ns);
    }
  }
  std::vector<Aggregate> out;
  out.reserve(merged.size());
  std::shared_lock<std::shared_mutex> lock(strings_mu_);
  auto str = [&](StringId id) { return id < strings_.size() ? strings_[id] : std::string("<bad id>"); };
  for (const auto& [key, v] : merged) {
    Aggregate a;
    a.kind = static_cast<Kind>(key.a >> 56);
    a.stage = static_cast<Stage>((key.a >> 48) & 0xff);
    a.replica = static_cast<int>((key.a >> 32) & 0xffff) - 1;
    a.line = static_cast<int>(static_cast<uint32_t>(key.a));
    a.key = str(static_cast<StringId>(key.b >> 32));
    a.reason = str(static_cast<StringId>(key.b));
    a.file = str(key.file);
    a.count = v.count;
    a.total_ns = v.total_ns;
    a.max_ns = v.max_ns;
    out.push_back(std::move(a));
  }
  std::sort(out.begin(), out.end(), [](const Aggregate& x, const Aggregate& y) {
    return std::make_tuple(x.kind, -x.count, x.stage, x.key, x.file, x.line, x.reason, x.replica) <
           std::make_tuple(y.kind, -y.count, y.stage, y.key, y.file, y.line, y.reason, y.replica);
  });
  return out;
}

std::vector<Event> Ledger::RecentEvents() const {
  const uint64_t end = next_seq_.load(std::memory_order_acquire);
  const uint64_t begin = end > ring_capacity_ ? end - ring_capacity_ : 0;
  std::vector<Event> out;
  out.reserve(end - begin);
  for (uint64_t seq = begin; seq < end; ++seq) {
    const Slot& slot = ring_[seq % ring_capacity_];
    const uint64_t done = 2 * seq + 2;
    if (slot.version.load(std::memory_order_acquire) != done) continue;
    std::array<uint64_t, 6> w;
    for (size_t i = 0; i < w.size(); ++i) w[i] = slot.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.version.load(std::memory_order_relaxed) != done) continue;  // overwritten meanwhile
    Event e;
    e.seq = seq;
    e.kind = static_cast<Kind>(w[0] & 0xff);
    e.stage = static_cast<Stage>((w[0] >> 8) & 0xff);
    e.replica = static_cast<int>((w[0] >> 16) & 0xffff) - 1;
    e.line = static_cast<int>(static_cast<uint32_t>(w[0] >> 32));
    e.key = Lookup(static_cast<StringId>(w[1] >> 32));
    e.reason = Lookup(static_cast<StringId>(w[1]));
    e.file = Lookup(static_cast<StringId>(w[2] >> 32));
    e.thread = static_cast<uint32_t>(w[2]);
    e.duration_ns = static_cast<int64_t>(w[3]);
    e.timestamp_ns = static_cast<int64_t>(w[4]);
    e.count = static_cast<int64_t>(w[5]);
    out.push_back(std::move(e));
  }
  return out;
}

size_t Ledger::MemoryBytes() const {
  // Node-based containers: a row or string costs its payload plus roughly a hash node.
  constexpr size_t kNodeOverhead = 32;
  size_t bytes = sizeof(*this) + ring_capacity_ * sizeof(Slot) + kNumStripes * sizeof(Stripe);
  bytes += rows_.load(std::memory_order_relaxed) * (sizeof(AggKey) + sizeof(AggValue) + kNodeOverhead);
  std::shared_lock<std::shared_mutex> lock(strings_mu_);
  bytes += string_bytes_ + strings_.size() * (sizeof(std::string) + sizeof(std::string_view) +
                                              sizeof(StringId) + kNodeOverhead);
  return bytes;
}

}  // namespace txe::graph_breaks
