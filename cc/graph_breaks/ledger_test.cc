#include "cc/graph_breaks/ledger.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace txe::graph_breaks {
namespace {

std::unique_ptr<Ledger> Make(LedgerOptions options = {}) {
  auto ledger = Ledger::Create(options);
  EXPECT_TRUE(ledger.ok()) << ledger.status().ToString();
  return std::move(ledger).value();
}

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(LedgerTest, RejectsBadOptions) {
  EXPECT_EQ(Ledger::Create({0, 16, 1 << 16}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Ledger::Create({16, 1, 1 << 16}).status().code(), StatusCode::kInvalidArgument);
  auto small = Ledger::Create({16, 16, 10});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("max_aggregates"), std::string::npos);
}

TEST(LedgerTest, KindAndStageNamesRoundTrip) {
  for (int k = 0; k < kNumKinds; ++k) {
    auto kind = KindFromName(KindName(static_cast<Kind>(k)));
    ASSERT_TRUE(kind.ok());
    EXPECT_EQ(static_cast<int>(*kind), k);
  }
  for (int s = 0; s < kNumStages; ++s) {
    auto stage = StageFromName(StageName(static_cast<Stage>(s)));
    ASSERT_TRUE(stage.ok());
    EXPECT_EQ(static_cast<int>(*stage), s);
  }
  EXPECT_EQ(KindFromName("graph-break").status().code(), StatusCode::kInvalidArgument);
  EXPECT_STREQ(KindName(Kind::kTransferToHost), "transfer_to_host");
}

TEST(LedgerTest, RecordsAggregatesAndEventsInOrder) {
  auto ledger = Make();
  ledger->Record(Kind::kGraphBreak, Stage::kDynamo, "", "print", {"model.py", 12});
  ledger->Record(Kind::kFallbackOp, Stage::kXla, "aten::digamma", {}, {}, 1500);
  ledger->Record(Kind::kFallbackOp, Stage::kXla, "aten::digamma", {}, {}, 500);
  ledger->Record(Kind::kCompile, Stage::kXla, "abc123", {}, {}, 7000, 3);

  EXPECT_EQ(ledger->Count(Kind::kGraphBreak), 1);
  EXPECT_EQ(ledger->Count(Kind::kFallbackOp), 2);
  EXPECT_EQ(ledger->TotalNs(Kind::kFallbackOp), 2000);
  EXPECT_EQ(ledger->Count(Kind::kCompile), 3);
  EXPECT_EQ(ledger->Count(Kind::kExecute), 0);
  EXPECT_EQ(ledger->events_recorded(), 4u);

  auto rows = ledger->Aggregates();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].kind, Kind::kGraphBreak);
  EXPECT_EQ(rows[0].reason, "print");
  EXPECT_EQ(rows[0].file, "model.py");
  EXPECT_EQ(rows[0].line, 12);
  EXPECT_EQ(rows[1].key, "aten::digamma");
  EXPECT_EQ(rows[1].count, 2);
  EXPECT_EQ(rows[1].total_ns, 2000);
  EXPECT_EQ(rows[1].max_ns, 1500);
  EXPECT_EQ(rows[2].key, "abc123");
  EXPECT_EQ(rows[2].count, 3);

  auto events = ledger->RecentEvents();
  ASSERT_EQ(events.size(), 4u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq, i);
  EXPECT_EQ(events[0].reason, "print");
  EXPECT_EQ(events[3].count, 3);
  EXPECT_EQ(events[3].duration_ns, 7000);
  EXPECT_LE(events[0].timestamp_ns, events[3].timestamp_ns);
}

TEST(LedgerTest, ReplicasAggregateApartAndTravelWithEvents) {
  auto ledger = Make();
  const StringId key = ledger->Intern("graph-1");
  for (int r : {0, 1, 1, kNoReplica}) {
    ledger->RecordInterned(Kind::kExecute, Stage::kBridge, key, kEmptyStringId, kEmptyStringId, 0, 10, 1, r);
  }
  ledger->Record(Kind::kSync, Stage::kLazy, "1", {}, {}, 0, 1, kMaxReplica + 1);  // out of range
  std::map<int, int64_t> by_replica;
  for (const Aggregate& a : ledger->Aggregates()) {
    if (a.kind == Kind::kExecute) by_replica[a.replica] += a.count;
    if (a.kind == Kind::kSync) EXPECT_EQ(a.replica, kNoReplica);
  }
  EXPECT_EQ(by_replica, (std::map<int, int64_t>{{kNoReplica, 1}, {0, 1}, {1, 2}}));
  EXPECT_EQ(ledger->Count(Kind::kExecute), 4);
  auto events = ledger->RecentEvents();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].replica, 0);
  EXPECT_EQ(events[2].replica, 1);
  EXPECT_EQ(events[3].replica, kNoReplica);
  EXPECT_EQ(events[0].key, "graph-1");
  EXPECT_EQ(events[0].line, 0);
}

TEST(LedgerTest, EpochIsTheSteadyClockAtCreation) {
  const int64_t before = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch()).count();
  auto ledger = Make();
  ledger->Record(Kind::kSync, Stage::kLazy, "");
  const int64_t after = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
  EXPECT_LE(before, ledger->epoch_ns());
  const Event e = ledger->RecentEvents().at(0);
  EXPECT_LE(ledger->epoch_ns() + e.timestamp_ns, after);
}

TEST(LedgerTest, RingKeepsTheMostRecentEvents) {
  auto ledger = Make({8, 1 << 10, 1 << 12});
  for (int i = 0; i < 100; ++i) ledger->Record(Kind::kExecute, Stage::kXla, "g" + std::to_string(i));
  auto events = ledger->RecentEvents();
  ASSERT_EQ(events.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(events[i].seq, static_cast<uint64_t>(92 + i));
    EXPECT_EQ(events[i].key, "g" + std::to_string(92 + i));
  }
  EXPECT_EQ(ledger->Count(Kind::kExecute), 100);  // the ring drops, the counts do not
}

TEST(LedgerTest, InterningIsStableAndBounded) {
  auto ledger = Make({16, 4, 1 << 12});
  EXPECT_EQ(ledger->Intern(""), kEmptyStringId);
  StringId a = ledger->Intern("a");
  StringId b = ledger->Intern("b");
  EXPECT_NE(a, b);
  EXPECT_EQ(ledger->Intern(std::string("a")), a);
  EXPECT_EQ(ledger->Intern("c"), kOverflowStringId);  // 4 strings: "", "<overflow>", a, b
  EXPECT_EQ(ledger->num_strings(), 4u);
  EXPECT_EQ(ledger->Lookup(a), "a");
  EXPECT_EQ(ledger->Lookup(4), "<bad id>");
  EXPECT_EQ(ledger->Lookup(kOverflowStringId), "<overflow>");
}

TEST(LedgerTest, AggregateOverflowKeepsCounts) {
  LedgerOptions options{64, 1 << 20, 16 * kNumKinds * kNumStages};
  auto ledger = Make(options);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ledger->Record(Kind::kFallbackOp, Stage::kXla, "op" + std::to_string(i));
  int64_t total = 0;
  bool saw_overflow = false;
  auto rows = ledger->Aggregates();
  EXPECT_LE(rows.size(), options.max_aggregates + 16);
  for (const auto& row : rows) {
    total += row.count;
    saw_overflow |= row.key == "<overflow>";
  }
  EXPECT_EQ(total, n);
  EXPECT_TRUE(saw_overflow);
  EXPECT_EQ(ledger->Count(Kind::kFallbackOp), n);
}

// 8 threads x 1M events through the hot path: no count is lost, per-key rows add up, and
// the ring holds only whole events (each event's fields agree with one another).
TEST(LedgerConcurrencyTest, EightThreadsMillionEventsEachLoseNothing) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000000;
  auto ledger = Make({4096, 1 << 10, 1 << 12});
  std::vector<StringId> keys, reasons;
  for (int t = 0; t < kThreads; ++t) {
    keys.push_back(ledger->Intern("graph" + std::to_string(t)));
    reasons.push_back(ledger->Intern("thread" + std::to_string(t)));
  }
  StringId file = ledger->Intern("lowering.cc");
  std::atomic<bool> stop{false};
  std::atomic<int64_t> torn{0}, snapshots{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (const Event& e : ledger->RecentEvents()) {
        // Writer t always pairs key t, reason t, line t, duration t+1.
        const std::string t = e.key.substr(5);
        if (e.reason != "thread" + t || e.line != std::stoi(t) || e.duration_ns != std::stoi(t) + 1 ||
            e.file != "lowering.cc") {
          torn.fetch_add(1);
        }
      }
      snapshots.fetch_add(1);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      const Kind kind = (t % 2) ? Kind::kExecute : Kind::kFallbackOp;
      for (int i = 0; i < kPerThread; ++i) ledger->RecordInterned(kind, Stage::kXla, keys[t], reasons[t], file, t, t + 1);
    });
  }
  for (auto& w : writers) w.join();
  stop.store(true);
  reader.join();

  EXPECT_EQ(ledger->events_recorded(), uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(ledger->Count(Kind::kExecute) + ledger->Count(Kind::kFallbackOp), int64_t{kThreads} * kPerThread);
  EXPECT_EQ(ledger->Count(Kind::kExecute), int64_t{kThreads / 2} * kPerThread);
  int64_t expected_ns = 0;
  for (int t = 0; t < kThreads; ++t) expected_ns += int64_t{kPerThread} * (t + 1);
  EXPECT_EQ(ledger->TotalNs(Kind::kExecute) + ledger->TotalNs(Kind::kFallbackOp), expected_ns);
  auto rows = ledger->Aggregates();
  ASSERT_EQ(rows.size(), size_t{kThreads});
  for (const auto& row : rows) {
    EXPECT_EQ(row.count, kPerThread) << row.key;
    EXPECT_EQ(row.max_ns, std::stoi(row.key.substr(5)) + 1);
  }
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(snapshots.load(), 0);
  auto events = ledger->RecentEvents();
  EXPECT_GT(events.size(), 0u);
  EXPECT_LE(events.size(), ledger->ring_capacity());
  for (size_t i = 1; i < events.size(); ++i) EXPECT_LT(events[i - 1].seq, events[i].seq);
}

// 10M events: the ledger's own footprint stops growing once its bounds are reached, and so does
// the process's resident memory.
TEST(LedgerMemoryTest, TenMillionEventsStayBounded) {
  auto ledger = Make({4096, 1 << 12, 1 << 12});
  std::vector<StringId> ops;
  for (int i = 0; i < 1000; ++i) ops.push_back(ledger->Intern("aten::op" + std::to_string(i)));
  for (int i = 0; i < 100000; ++i) ledger->RecordInterned(Kind::kFallbackOp, Stage::kXla, ops[i % 1000], 0, 0, i % 7, 1);
  const size_t ledger_bytes = ledger->MemoryBytes();
  const size_t rss = ResidentBytes();
  for (int i = 100000; i < 10000000; ++i) {
    ledger->RecordInterned(Kind::kFallbackOp, Stage::kXla, ops[i % 1000], 0, 0, i % 7, 1);
  }
  EXPECT_EQ(ledger->Count(Kind::kFallbackOp), 10000000);
  EXPECT_EQ(ledger->MemoryBytes(), ledger_bytes);
  EXPECT_LT(ResidentBytes(), rss + (size_t{8} << 20));
  EXPECT_LT(ledger_bytes, size_t{4} << 20);
  EXPECT_EQ(ledger->RecentEvents().size(), 4096u);
  // Distinct strings beyond the cap fold into "<overflow>" instead of growing the table.
  for (int i = 0; i < 100000; ++i) ledger->Record(Kind::kFallbackOp, Stage::kXla, "fresh" + std::to_string(i));
  EXPECT_LT(ledger->MemoryBytes(), size_t{4} << 20);
  EXPECT_EQ(ledger->Count(Kind::kFallbackOp), 10100000);
}

}  // namespace
}  // namespace txe::graph_breaks
