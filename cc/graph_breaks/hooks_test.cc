#include "cc/graph_breaks/hooks.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace txe::graph_breaks {
namespace {

struct HooksOn {
  HooksOn() { SetHooksEnabled(true); }
  ~HooksOn() { SetHooksEnabled(false); }
};

TEST(HooksTest, DisabledHooksRecordNothing) {
  ASSERT_FALSE(HooksEnabled());
  const uint64_t before = GlobalLedger().events_recorded();
  OnFallbackOp("aten::digamma");
  TXE_GB_GRAPH_BREAK("nothing");
  { TXE_GB_SCOPED(kCompile, kXla, "h"); }
  EXPECT_EQ(GlobalLedger().events_recorded(), before);
}

TEST(HooksTest, MacrosCarryTheCallSite) {
  HooksOn on;
  const int64_t fallbacks = GlobalLedger().Count(Kind::kFallbackOp);
  const int line = __LINE__ + 1;
  TXE_GB_FALLBACK_OP(std::string("aten::digamma"));
  EXPECT_EQ(GlobalLedger().Count(Kind::kFallbackOp), fallbacks + 1);
  auto events = GlobalLedger().RecentEvents();
  ASSERT_FALSE(events.empty());
  const Event& e = events.back();
  EXPECT_EQ(e.kind, Kind::kFallbackOp);
  EXPECT_EQ(e.key, "aten::digamma");
  EXPECT_EQ(e.line, line);
  EXPECT_NE(e.file.find("hooks_test.cc"), std::string::npos);
}

TEST(HooksTest, ScopedEventTimesItsScope) {
  HooksOn on;
  const int64_t compiles = GlobalLedger().Count(Kind::kCompile);
  {
    TXE_GB_SCOPED(kCompile, kXla, "graph-hash");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(GlobalLedger().Count(Kind::kCompile), compiles + 1);
  const Event e = GlobalLedger().RecentEvents().back();
  EXPECT_EQ(e.key, "graph-hash");
  EXPECT_GE(e.duration_ns, 2000000);
}

TEST(HooksTest, FreeFunctionsPickTheirKinds) {
  HooksOn on;
  Ledger& l = GlobalLedger();
  const KindTotals before = l.Totals();
  OnGraphBreak("data-dependent branch", {"m.py", 3});
  OnCompile("h1", /*cached=*/false, 10);
  OnCompile("h1", /*cached=*/true, 1);
  OnExecute("h1", 5);
  OnTransferToHost("loss", 7);
  OnSync("mark_step");
  const KindTotals after = l.Totals();
  auto delta = [&](Kind k) { return after.count[static_cast<int>(k)] - before.count[static_cast<int>(k)]; };
  EXPECT_EQ(delta(Kind::kGraphBreak), 1);
  EXPECT_EQ(delta(Kind::kCompile), 1);
  EXPECT_EQ(delta(Kind::kCachedCompile), 1);
  EXPECT_EQ(delta(Kind::kExecute), 1);
  EXPECT_EQ(delta(Kind::kTransferToHost), 1);
  EXPECT_EQ(delta(Kind::kSync), 1);
}

TEST(HooksTest, EnablesNest) {
  SetHooksEnabled(true);
  SetHooksEnabled(true);
  SetHooksEnabled(false);
  EXPECT_TRUE(HooksEnabled());
  SetHooksEnabled(false);
  EXPECT_FALSE(HooksEnabled());
  SetHooksEnabled(false);  // an extra disable does not go negative
  SetHooksEnabled(true);
  EXPECT_TRUE(HooksEnabled());
  SetHooksEnabled(false);
}

}  // namespace
}  // namespace txe::graph_breaks
