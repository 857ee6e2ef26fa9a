// Drives the fork stand-in the way torch_xla would and asserts what torch_xla_ext's hooks
// recorded: all-reduces typed after ConvertHloToStableHlo (cc/collectives), compiles, executions,
// transfers and fallback ops in the graph-break ledger (cc/graph_breaks), and the call_jax
// parameter mapping (cc/jax_call).
#include "examples/fork/fork_lowering.h"

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cc/collectives/analysis.h"
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

// ---- shared helpers -----------------------------------------------------------------------

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

// (kind, key, file, line) -> count, over the process-wide ledger.
using Rows = std::map<std::tuple<int, std::string, std::string, int>, int64_t>;
Rows AggregateRows() {
  Rows rows;
  for (const gb::Aggregate& a : gb::GlobalLedger().Aggregates()) {
    rows[{static_cast<int>(a.kind), a.key, a.file, a.line}] += a.count;
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

CompileInstance Instance(xla::HloModuleProto module) { return {std::move(module), "TT:0", false}; }

// ---- Compile: all-reduce typing after ConvertHloToStableHlo -> cc/collectives ------------

TEST(ForkCompileTest, ConvertHloToStableHloGivesMainsValueGraph) {
  ModuleOp module;
  xla::HloModuleProto proto = AllReduceModule("scaled", 4, "add", 0.25);
  ASSERT_TRUE(ConvertHloToStableHlo(&proto, &module).ok());
  const txe::graph::Graph& g = module.main;
  EXPECT_EQ(g.num_args, 2);
  std::vector<std::string> ops;
  for (const txe::graph::Op& op : g.ops) ops.push_back(op.name);
  EXPECT_EQ(ops, (std::vector<std::string>{"stablehlo.all_reduce", "stablehlo.constant",
                                           "stablehlo.broadcast_in_dim", "stablehlo.multiply"}));
  EXPECT_EQ(g.ops[0].reduction, "stablehlo.add");
  EXPECT_EQ(g.ops[0].results.size(), 2u);  // the data and torch_xla's token
  ASSERT_TRUE(g.ops[1].splat_value.has_value());
  EXPECT_EQ(*g.ops[1].splat_value, 0.25);
  EXPECT_EQ(g.returned, g.ops[3].results);
}

TEST(ForkCompileTest, EveryCompiledAllReduceIsTypedAndRecorded) {
  PjRtComputationClient client(/*device_count=*/4);
  const int64_t start = tc::NextAllReduceSequence();
  std::vector<CompileInstance> instances;
  instances.push_back(Instance(AllReduceModule("grad_sync", 8, "add", 0.5, {{0, 1}, {2, 3}})));
  instances.push_back(Instance(AllReduceModule("max_norm", 8, "maximum", 1.0)));
  auto computations = client.Compile(std::move(instances));
  ASSERT_TRUE(computations.ok()) << computations.status().ToString();
  ASSERT_EQ(computations->size(), 2u);

  std::vector<tc::AllReduceCall> calls = tc::RecordedAllReducesSince(start);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].reduce, "sum");
  EXPECT_EQ(calls[0].applied_scale, 0.5);  // the multiply after the reduce, found by the analysis
  EXPECT_EQ(calls[0].requested_scale, 0.5);
  EXPECT_EQ(calls[0].lowering, "all_reduce+multiply");
  EXPECT_EQ(calls[0].replica_groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(calls[0].world_size, 4);
  EXPECT_EQ(calls[1].reduce, "max");
  EXPECT_EQ(calls[1].applied_scale, 1.0);
  EXPECT_EQ(calls[1].lowering, "all_reduce");
  EXPECT_EQ(calls[1].sequence, calls[0].sequence + 1);
  // The token operand torch_xla adds is found by structure (its result is unused).
  auto analysis = tc::Analyze((*computations)[0]->module.main, std::vector<tc::DeclaredInput>(2));
  ASSERT_TRUE(analysis.ok());
  EXPECT_EQ(analysis->collectives[0].token_input, std::optional<int64_t>(1));
}

TEST(ForkCompileTest, AModuleTheConversionCannotReadIsATypedErrorAndRecordsNoCall) {
  PjRtComputationClient client(2);
  const int64_t start = tc::NextAllReduceSequence();
  xla::HloModuleProto bad = AllReduceModule("bad", 4, "add", 0.5);
  bad.mutable_computations(1)->mutable_instructions(2)->set_operand_ids(0, 999);  // the all-reduce's data
  std::vector<CompileInstance> instances;
  instances.push_back(Instance(bad));
  auto computations = client.Compile(std::move(instances));
  ASSERT_FALSE(computations.ok());
  EXPECT_EQ(computations.status().code(), txe::StatusCode::kInvalidArgument);
  EXPECT_NE(computations.status().message().find("instruction all-reduce.12: operand 999"), std::string::npos)
      << computations.status().message();
  EXPECT_TRUE(tc::RecordedAllReducesSince(start).empty());
  xla::HloModuleProto no_entry = AllReduceModule("no_entry", 4, "add", 1.0);
  no_entry.set_entry_computation_id(7);
  ModuleOp module;
  EXPECT_EQ(ConvertHloToStableHlo(&no_entry, &module).message(), "HloModuleProto no_entry: no entry computation 7");
}

// ---- Compile / ExecuteComputation: accounting -> cc/graph_breaks -------------------------

TEST(ForkRuntimeTest, CompilesAndExecutionsAreCountedWithTheirKeyAndSite) {
  PjRtComputationClient client(1);
  HooksOn hooks;
  const Counts c0 = KindCounts();
  const Rows r0 = AggregateRows();
  std::vector<CompileInstance> instances;
  instances.push_back(Instance(AllReduceModule("step", 16, "add", 1.0)));
  auto computations = client.Compile(std::move(instances));
  ASSERT_TRUE(computations.ok());
  const Computation& step = *(*computations)[0];
  auto x = std::make_shared<Data>(Data{"TT:0", {16}});
  for (int i = 0; i < 3; ++i) client.ExecuteComputation(step, {x, x}, "TT:0", {});
  const Counts c1 = KindCounts();
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kCompile), 1);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kExecute), 3);
  const std::string key = "step/" + step.hash;
  int rows = 0;
  for (const auto& [row, n] : RowDelta(r0, AggregateRows())) {
    const auto& [kind, k, file, line] = row;
    EXPECT_EQ(k, key);
    EXPECT_NE(file.find("examples/fork/fork_lowering.cc"), std::string::npos) << file;
    EXPECT_GT(line, 0);
    EXPECT_EQ(n, kind == static_cast<int>(gb::Kind::kExecute) ? 3 : 1);
    ++rows;
  }
  EXPECT_EQ(rows, 2);
}

TEST(ForkRuntimeTest, EverySharedTransferToHostCompilesTheIdentityGraphAgain) {
  // pytorch/xla#9751: ReplicateShardedData compiles (uncached) and runs an identity graph for
  // every sharded tensor brought to the host; Compile's accounting shows each one.
  PjRtComputationClient client(8);
  HooksOn hooks;
  auto sharded = std::make_shared<Data>(Data{"SPMD:0", {64, 32}, /*sharded=*/true});
  auto replicated = std::make_shared<Data>(Data{"SPMD:0", {64, 32}});
  const Counts c0 = KindCounts();
  const Rows r0 = AggregateRows();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.TransferFromDevice({sharded}).ok());
  ASSERT_TRUE(client.TransferFromDevice({replicated}).ok());  // no identity graph for this one
  const Counts c1 = KindCounts();
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kCompile), 3);  // the same graph, compiled three times
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kCachedCompile), 0);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kExecute), 3);
  EXPECT_EQ(Delta(c0, c1, gb::Kind::kTransferToHost), 4);
  std::set<std::string> compiled;
  for (const auto& [row, n] : RowDelta(r0, AggregateRows())) {
    if (std::get<0>(row) == static_cast<int>(gb::Kind::kCompile)) {
      compiled.insert(std::get<1>(row));
      EXPECT_EQ(n, 3);
    }
  }
  ASSERT_EQ(compiled.size(), 1u);
  EXPECT_EQ(compiled.begin()->rfind("ReplicateShardedData/", 0), 0u) << *compiled.begin();
}

TEST(ForkRuntimeTest, ConcurrentCompilesAreCountedExactly) {
  PjRtComputationClient client(2);
  HooksOn hooks;
  const Counts c0 = KindCounts();
  constexpr int kThreads = 4, kCompiles = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&client, t] {
      for (int i = 0; i < kCompiles; ++i) {
        std::vector<CompileInstance> instances;
        instances.push_back(Instance(AllReduceModule("t" + std::to_string(t), 4, "add", 1.0)));
        ASSERT_TRUE(client.Compile(std::move(instances)).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(Delta(c0, KindCounts(), gb::Kind::kCompile), kThreads * kCompiles);
}

// ---- xla_fallback: the CPU fallback -> cc/graph_breaks ---------------------------------------

TEST(ForkFallbackTest, EachFallbackOpIsCountedWhileHooksAreOn) {
  Stack stack;
  const Counts c0 = KindCounts();
  xla_fallback({"aten::digamma"}, &stack);  // hooks off: nothing
  EXPECT_EQ(KindCounts(), c0);
  HooksOn hooks;
  const Rows r0 = AggregateRows();
  xla_fallback({"aten::digamma"}, &stack);
  xla_fallback({"aten::digamma"}, &stack);
  xla_fallback({"aten::polygamma"}, &stack);
  EXPECT_EQ(Delta(c0, KindCounts(), gb::Kind::kFallbackOp), 3);
  std::map<std::string, int64_t> by_op;
  for (const auto& [row, n] : RowDelta(r0, AggregateRows())) by_op[std::get<1>(row)] += n;
  EXPECT_EQ(by_op, (std::map<std::string, int64_t>{{"aten::digamma", 2}, {"aten::polygamma", 1}}));
}

TEST(ForkFallbackTest, NestedEnablesCount) {
  {
    HooksOn outer;
    {
      HooksOn inner;
    }
    EXPECT_TRUE(gb::HooksEnabled());  // the outer region still accounts
  }
  EXPECT_FALSE(gb::HooksEnabled());
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
