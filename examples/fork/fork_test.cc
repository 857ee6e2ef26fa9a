// Drives the fork stand-in the way torch_xla would and asserts what torch_xla_ext's hooks
// recorded: all-reduce calls (cc/collectives), graph-break ledger rows (cc/graph_breaks) and the
// call_jax parameter mapping (cc/jax_call).
#include "examples/fork/fork_lowering.h"

#include <array>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cc/collectives/hooks.h"
#include "cc/graph_breaks/hooks.h"
#include "cc/graph_breaks/ledger.h"
#include "cc/jax_call/param_mapping.h"
#include "cc/jax_call/hlo_proto_testing.h"
#include "gtest/gtest.h"

namespace xla_fork {
namespace {

namespace tc = txe::collectives;
namespace gb = txe::graph_breaks;
namespace jc = txe::jax_call;

// ---- all-reduce lowering -> cc/collectives ------------------------------------------------

TEST(ForkAllReduceTest, SingleReplicaDropsTheScaleAndTheHookShowsIt) {
  const int64_t start = tc::NextAllReduceSequence();
  auto lowered = LowerAllReduce({"sum", 0.25, {}}, /*world_size=*/1);
  ASSERT_TRUE(lowered.ok()) << lowered.status().ToString();
  EXPECT_EQ(lowered->emitted, "clone");
  EXPECT_EQ(lowered->sequence, start);

  std::vector<tc::AllReduceCall> calls = tc::RecordedAllReducesSince(start);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].reduce, "sum");
  EXPECT_EQ(calls[0].requested_scale, 0.25);  // what the model asked for ...
  EXPECT_EQ(calls[0].applied_scale, 1.0);     // ... and what the lowering multiplied in
  EXPECT_EQ(calls[0].lowering, "clone");
  EXPECT_EQ(calls[0].world_size, 1);
  EXPECT_TRUE(calls[0].replica_groups.empty());
  EXPECT_EQ(calls[0].sequence, start);
}

TEST(ForkAllReduceTest, MultiReplicaAppliesTheScaleAndObserversSeeEveryCall) {
  std::vector<tc::AllReduceCall> observed;
  const int64_t observer = tc::AddAllReduceObserver([&](const tc::AllReduceCall& c) { observed.push_back(c); });
  const int64_t start = tc::NextAllReduceSequence();

  auto scaled = LowerAllReduce({"sum", 0.5, {{0, 1}, {2, 3}}}, /*world_size=*/4);
  auto plain = LowerAllReduce({"max", 1.0, {}}, /*world_size=*/4);
  ASSERT_TRUE(scaled.ok() && plain.ok());
  EXPECT_EQ(scaled->emitted, "all_reduce+multiply");
  EXPECT_EQ(plain->emitted, "all_reduce");
  ASSERT_TRUE(tc::RemoveAllReduceObserver(observer).ok());
  EXPECT_EQ(tc::RemoveAllReduceObserver(observer).code(), txe::StatusCode::kNotFound);

  std::vector<tc::AllReduceCall> calls = tc::RecordedAllReducesSince(start);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].applied_scale, 0.5);
  EXPECT_EQ(calls[0].replica_groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(calls[0].lowering, "all_reduce+multiply");
  EXPECT_EQ(calls[1].reduce, "max");
  EXPECT_EQ(calls[1].sequence, calls[0].sequence + 1);
  ASSERT_EQ(observed.size(), 2u);
  EXPECT_EQ(observed[0].sequence, calls[0].sequence);
  EXPECT_EQ(observed[1].lowering, "all_reduce");
}

TEST(ForkAllReduceTest, InvalidCallsAreTypedErrorsAndNotRecorded) {
  const int64_t start = tc::NextAllReduceSequence();
  auto nan = LowerAllReduce({"sum", std::nan(""), {}}, 4);
  ASSERT_FALSE(nan.ok());
  EXPECT_EQ(nan.status().code(), txe::StatusCode::kInvalidArgument);
  EXPECT_EQ(nan.status().message(), "AllReduceCall scale is not finite");
  auto world = LowerAllReduce({"sum", 1.0, {}}, 0);
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().message(), "AllReduceCall.world_size 0 < 1");
  auto reduce = LowerAllReduce({"", 1.0, {}}, 2);
  EXPECT_EQ(reduce.status().message(), "AllReduceCall.reduce is empty");
  EXPECT_TRUE(tc::RecordedAllReducesSince(start).empty());
  EXPECT_EQ(tc::NextAllReduceSequence(), start);
}

TEST(ForkAllReduceTest, ConcurrentLoweringsGetDistinctSequenceNumbers) {
  const int64_t start = tc::NextAllReduceSequence();
  constexpr int kThreads = 4, kCalls = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(LowerAllReduce({"sum", 0.5, {}}, 2).ok());
    });
  }
  for (auto& t : threads) t.join();
  std::vector<tc::AllReduceCall> calls = tc::RecordedAllReducesSince(start);
  ASSERT_EQ(calls.size(), size_t{kThreads * kCalls});
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].sequence, start + static_cast<int64_t>(i));
}

// ---- dynamo bridge -> cc/graph_breaks -----------------------------------------------------

// What torch_xla_ext.graph_breaks.account() does around its region.
class HooksOn {
 public:
  HooksOn() { gb::SetHooksEnabled(true); }
  ~HooksOn() { gb::SetHooksEnabled(false); }
};

using Counts = std::array<int64_t, gb::kNumKinds>;
Counts KindCounts() { return gb::GlobalLedger().Totals().count; }
int64_t Delta(const Counts& before, const Counts& after, gb::Kind k) {
  return after[static_cast<int>(k)] - before[static_cast<int>(k)];
}

// (kind, key, reason, file, line) -> count, over the process-wide ledger.
using Rows = std::map<std::tuple<int, std::string, std::string, std::string, int>, int64_t>;
Rows AggregateRows() {
  Rows rows;
  for (const gb::Aggregate& a : gb::GlobalLedger().Aggregates()) {
    rows[{static_cast<int>(a.kind), a.key, a.reason, a.file, a.line}] += a.count;
  }
  return rows;
}
// The rows that grew between two snapshots, with how much.
Rows RowDelta(const Rows& before, const Rows& after) {
  Rows out;
  for (const auto& [k, n] : after) {
    auto it = before.find(k);
    const int64_t d = n - (it == before.end() ? 0 : it->second);
    if (d) out[k] = d;
  }
  return out;
}

// mm -> add -> digamma (no XLA lowering: CPU fallback) -> mul -> sum.
FxGraph ExampleGraph(const std::string& fallback_op = "aten::digamma") {
  return FxGraph{{{"mm", "aten::mm"},
                  {"add", "aten::add.Tensor"},
                  {"digamma", fallback_op},
                  {"mul", "aten::mul.Tensor"},
                  {"sum", "aten::sum"}}};
}
std::set<std::string> XlaOps() { return {"aten::mm", "aten::add.Tensor", "aten::mul.Tensor", "aten::sum"}; }

TEST(ForkDynamoBridgeTest, PartitionsCompilesAndExecutesAsRecorded) {
  DynamoBridge bridge(XlaOps());
  HooksOn hooks;
  const Counts c0 = KindCounts();
  const Rows r0 = AggregateRows();
  auto first = bridge.Run(ExampleGraph());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const Counts c1 = KindCounts();
  const Rows r1 = AggregateRows();

  ASSERT_EQ(first->partitions.size(), 2u);
  EXPECT_EQ(first->fallback_ops, std::vector<std::string>{"aten::digamma"});
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kFxGraph), 1);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kXlaPartition), 2);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kFallbackNode), 1);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kFallbackOp), 1);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kCompile), 2);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kCachedCompile), 0);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kExecute), 2);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kGraphBreak), 0);

  // Rows carry the key (aten op, graph hash), the reason (FX node name) and the fork's frame.
  const Rows d1 = RowDelta(r0, r1);
  int fallback_rows = 0, compile_rows = 0;
  for (const auto& [row, n] : d1) {
    const auto& [kind, key, reason, file, line] = row;
    EXPECT_NE(file.find("examples/fork/fork_lowering.cc"), std::string::npos) << file;
    EXPECT_GT(line, 0);
    if (kind == static_cast<int>(gb::Kind::kFallbackNode)) {
      ++fallback_rows;
      EXPECT_EQ(key, "aten::digamma");
      EXPECT_EQ(reason, "digamma");
      EXPECT_EQ(n, 1);
    }
    if (kind == static_cast<int>(gb::Kind::kCompile)) {
      ++compile_rows;
      EXPECT_TRUE(key == first->partitions[0].graph_hash || key == first->partitions[1].graph_hash) << key;
    }
  }
  EXPECT_EQ(fallback_rows, 1);
  EXPECT_EQ(compile_rows, 2);

  // The ring keeps the run's events in order: partition 0 executes, the fallback op, partition 1.
  std::vector<gb::Event> recent = gb::GlobalLedger().RecentEvents();
  ASSERT_GE(recent.size(), 3u);
  const gb::Event* tail = &recent[recent.size() - 3];
  EXPECT_EQ(tail[0].kind, gb::Kind::kExecute);
  EXPECT_EQ(tail[0].key, first->partitions[0].graph_hash);
  EXPECT_EQ(tail[1].kind, gb::Kind::kFallbackOp);
  EXPECT_EQ(tail[1].key, "aten::digamma");
  EXPECT_EQ(tail[2].kind, gb::Kind::kExecute);
  EXPECT_EQ(tail[2].key, first->partitions[1].graph_hash);

  // The same graph again: both partitions hit the compile cache.
  auto second = bridge.Run(ExampleGraph());
  ASSERT_TRUE(second.ok());
  const Counts c2 = KindCounts();
  EXPECT_EQ(second->cached_compiles, 2);
  EXPECT_EQ(Delta(c1, c2, gb::Kind::kCompile), 0);
  EXPECT_EQ(Delta(c1, c2, gb::Kind::kCachedCompile), 2);
  EXPECT_EQ(Delta(c1, c2, gb::Kind::kExecute), 2);
  EXPECT_EQ(Delta(c1, c2, gb::Kind::kFallbackOp), 1);
}

TEST(ForkDynamoBridgeTest, DisabledHooksRecordNothing) {
  ASSERT_FALSE(gb::HooksEnabled());
  DynamoBridge bridge(XlaOps());
  const uint64_t events = gb::GlobalLedger().events_recorded();
  const Counts c0 = KindCounts();
  auto run = bridge.Run(ExampleGraph("aten::lgamma"));
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->compiles, 2);  // the bridge did its work ...
  EXPECT_EQ(gb::GlobalLedger().events_recorded(), events);  // ... and the ledger saw none of it
  EXPECT_EQ(KindCounts(), c0);
}

TEST(ForkDynamoBridgeTest, NestedEnablesCountAndAnEmptyGraphIsAnError) {
  {
    HooksOn outer;
    {
      HooksOn inner;
    }
    EXPECT_TRUE(gb::HooksEnabled());  // the outer region still accounts
  }
  EXPECT_FALSE(gb::HooksEnabled());
  DynamoBridge bridge(XlaOps());
  auto empty = bridge.Run(FxGraph{});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), txe::StatusCode::kInvalidArgument);
}

TEST(ForkDynamoBridgeTest, ConcurrentRunsAreCountedExactly) {
  DynamoBridge bridge(XlaOps());
  HooksOn hooks;
  const Counts c0 = KindCounts();
  constexpr int kThreads = 4, kRuns = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&bridge] {
      for (int i = 0; i < kRuns; ++i) ASSERT_TRUE(bridge.Run(ExampleGraph("aten::polygamma")).ok());
    });
  }
  for (auto& t : threads) t.join();
  const Counts c1 = KindCounts();
  constexpr int64_t kTotal = kThreads * kRuns;
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kFxGraph), kTotal);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kCompile), 2);  // one compile per distinct partition
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kCachedCompile), 2 * kTotal - 2);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kExecute), 2 * kTotal);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kFallbackOp), kTotal);
}

// ---- call_jax lowering -> cc/jax_call -----------------------------------------------------

using txe::jax_call::testing::HloModuleProto;
using txe::jax_call::testing::Shape;
using txe::jax_call::testing::TupleShape;
using PT = jc::PrimitiveType;

jc::Leaf Tensor(std::string path, std::string dtype, std::vector<int64_t> shape) {
  return jc::Leaf{std::move(path), jc::LeafKind::kTensor, std::move(dtype), std::move(shape), ""};
}
jc::Leaf Static(std::string path, std::string value) {
  return jc::Leaf{std::move(path), jc::LeafKind::kStatic, "", {}, std::move(value)};
}

// f(x, unused, 2.0, w=w) -> (x * w * c, sum(x)) with one hoisted constant c: f32[3], as JAX
// lowers it with keep_unused=False. The leaf `w` is declared with `w_dtype`.
CallJaxRequest ExampleRequest(const std::string& w_dtype = "bfloat16", const std::string& sum_dtype = "float32") {
  CallJaxRequest r;
  r.hlo_module_proto = HloModuleProto(
      "jit_f", {Shape(PT::F32, {3}), Shape(PT::F32, {2, 3}), Shape(PT::BF16, {3})},
      TupleShape({Shape(PT::F32, {2, 3}), Shape(PT::F32, {})}));
  r.leaves = {Tensor("args[0]", "float32", {2, 3}), Tensor("args[1]", "float32", {5}), Static("args[2]", "2.0"),
              Tensor("kwargs['w']", w_dtype, {3})};
  r.constants = {{"float32", {3}}};
  // Indices into [constants..., tensor leaves...] = [c0, args[0], args[1], kwargs['w']].
  r.kept_var_idx = {0, 1, 3};
  r.outputs = {Tensor("output[0]", "float32", {2, 3}), Tensor("output[1]", sum_dtype, {})};
  return r;
}

TEST(ForkCallJaxTest, OperandsFollowTheHloParameters) {
  auto operands = LowerCallJax(ExampleRequest());
  ASSERT_TRUE(operands.ok()) << operands.status().ToString();
  ASSERT_EQ(operands->size(), 3u);
  EXPECT_TRUE((*operands)[0].is_constant);
  EXPECT_EQ((*operands)[0].path, "const[0]");
  EXPECT_FALSE((*operands)[1].is_constant);
  EXPECT_EQ((*operands)[1].index, 0);
  EXPECT_EQ((*operands)[1].path, "args[0]");
  EXPECT_EQ((*operands)[2].index, 3);  // a leaf index: statics and unused leaves count too
  EXPECT_EQ((*operands)[2].path, "kwargs['w']");
}

TEST(ForkCallJaxTest, MappingRowsNameEveryLeaf) {
  const CallJaxRequest r = ExampleRequest();
  auto m = jc::BuildParamMapping(r.leaves, r.constants, r.kept_var_idx, r.hlo_module_proto);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->module_name, "jit_f");
  EXPECT_EQ(m->num_hlo_params(), 3);
  ASSERT_EQ(m->rows.size(), 4u);
  EXPECT_EQ(m->rows[0].hlo_param, 1);
  EXPECT_FALSE(m->rows[1].kept);  // unused: JAX dropped it
  EXPECT_EQ(m->rows[1].hlo_param, -1);
  EXPECT_EQ(m->rows[2].kind, jc::LeafKind::kStatic);
  EXPECT_EQ(m->rows[2].value, "2.0");
  EXPECT_EQ(m->rows[3].hlo_param, 2);
  ASSERT_EQ(m->constants.size(), 1u);
  EXPECT_EQ(m->constants[0].hlo_param, 0);
  ASSERT_EQ(m->results.size(), 2u);
  EXPECT_EQ(m->results[1].ToString(), "f32[]");
  const std::string table = m->ToTable();
  EXPECT_NE(table.find("3 parameters (1 hoisted constants, 2 kept leaves)"), std::string::npos) << table;
}

TEST(ForkCallJaxTest, BadModuleIsATypedErrorNamingTheLeaf) {
  // The caller passes w as float32; the module JAX lowered takes bf16[3] for it.
  auto dtype = LowerCallJax(ExampleRequest("float32"));
  ASSERT_FALSE(dtype.ok());
  EXPECT_EQ(dtype.status().code(), txe::StatusCode::kInvalidArgument);
  EXPECT_EQ(dtype.status().message(), "kwargs['w']: HLO parameter 2 is bf16[3] but the leaf is f32[3]");

  auto output = LowerCallJax(ExampleRequest("bfloat16", "int32"));
  ASSERT_FALSE(output.ok());
  EXPECT_EQ(output.status().message(), "output[1]: HLO output 1 is f32[] but the traced output is s32[]");

  CallJaxRequest truncated = ExampleRequest();
  truncated.hlo_module_proto.resize(truncated.hlo_module_proto.size() / 2);
  auto bad = LowerCallJax(truncated);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), txe::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace xla_fork
