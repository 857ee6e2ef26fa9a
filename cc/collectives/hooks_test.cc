#include "cc/collectives/hooks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace txe::collectives {
namespace {

AllReduceCall Call(double scale) {
  AllReduceCall c;
  c.reduce = "sum";
  c.requested_scale = scale;
  c.applied_scale = scale;
  c.lowering = "all_reduce+multiply";
  return c;
}

TEST(HooksTest, RecordsInOrderSinceASequence) {
  const int64_t start = NextAllReduceSequence();
  auto a = RecordAllReduce(Call(0.5));
  auto b = RecordAllReduce(Call(2.0));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, start);
  EXPECT_EQ(*b, start + 1);
  auto since = RecordedAllReducesSince(start);
  ASSERT_EQ(since.size(), 2u);
  EXPECT_DOUBLE_EQ(since[0].requested_scale, 0.5);
  EXPECT_EQ(since[1].sequence, start + 1);
  EXPECT_EQ(RecordedAllReducesSince(start + 2).size(), 0u);
  ClearRecordedAllReduces();
  EXPECT_TRUE(RecordedAllReducesSince(0).empty());
  EXPECT_EQ(NextAllReduceSequence(), start + 2);  // sequence numbers are never reused
}

TEST(HooksTest, RejectsBadCalls) {
  AllReduceCall c = Call(1.0);
  c.reduce.clear();
  EXPECT_EQ(RecordAllReduce(c).status().code(), StatusCode::kInvalidArgument);
  c = Call(1.0);
  c.world_size = 0;
  EXPECT_EQ(RecordAllReduce(c).status().code(), StatusCode::kInvalidArgument);
  c = Call(1.0 / 0.0);
  EXPECT_EQ(RecordAllReduce(c).status().code(), StatusCode::kInvalidArgument);
}

TEST(HooksTest, ObserversAndThreads) {
  std::atomic<int> seen{0};
  const int64_t id = AddAllReduceObserver([&](const AllReduceCall& c) { seen += c.reduce == "sum"; });
  const int64_t start = NextAllReduceSequence();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 100; ++i) ASSERT_TRUE(RecordAllReduce(Call(1.0)).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen.load(), 400);
  auto since = RecordedAllReducesSince(start);
  ASSERT_EQ(since.size(), 400u);
  for (size_t i = 1; i < since.size(); ++i) EXPECT_EQ(since[i].sequence, since[i - 1].sequence + 1);
  EXPECT_TRUE(RemoveAllReduceObserver(id).ok());
  EXPECT_EQ(RemoveAllReduceObserver(id).code(), StatusCode::kNotFound);
  ASSERT_TRUE(RecordAllReduce(Call(1.0)).ok());
  EXPECT_EQ(seen.load(), 400);
}

}  // namespace
}  // namespace txe::collectives
