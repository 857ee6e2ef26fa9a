#include "cc/collectives/analysis.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace txe::collectives {
namespace {

// Builds graphs op by op; values get ids in creation order.
class Builder {
 public:
  int64_t Arg(std::vector<int64_t> shape) {
    g_.values.push_back({std::move(shape), "f32"});
    return g_.num_args++;
  }
  std::vector<int64_t> Add(std::string name, std::vector<int64_t> operands,
                           std::vector<std::vector<int64_t>> result_shapes,
                           std::string reduction = "", std::optional<double> splat = std::nullopt) {
    graph::Op op;
    op.name = std::move(name);
    op.operands = std::move(operands);
    op.reduction = std::move(reduction);
    op.splat_value = splat;
    for (auto& s : result_shapes) {
      op.results.push_back(static_cast<int64_t>(g_.values.size()));
      g_.values.push_back({std::move(s), "f32"});
    }
    g_.ops.push_back(op);
    return g_.ops.back().results;
  }
  graph::Graph& Return(std::vector<int64_t> values) {
    g_.returned = std::move(values);
    return g_;
  }

 private:
  graph::Graph g_;
};

std::vector<DeclaredInput> Declared(std::vector<InputKind> kinds) {
  std::vector<DeclaredInput> out;
  for (InputKind k : kinds) out.push_back({k, std::nullopt});
  return out;
}

// torch_xla's shape: main(%token, %w, %x); all_reduce(x*w, token) -> (r, t); r * 0.5.
TEST(AnalyzeTest, TokenFromStructureAndScale) {
  Builder b;
  const int64_t token = b.Arg({});
  const int64_t w = b.Arg({2});
  const int64_t x = b.Arg({2});
  const int64_t cst = b.Add("stablehlo.constant", {}, {{2}}, "", 0.5)[0];
  const int64_t mul = b.Add("stablehlo.multiply", {x, w}, {{2}})[0];
  auto ar = b.Add("stablehlo.all_reduce", {mul, token}, {{2}, {}}, "stablehlo.add");
  const int64_t out = b.Add("stablehlo.multiply", {ar[0], cst}, {{2}})[0];
  graph::Graph& g = b.Return({out});

  auto a = Analyze(g, Declared({InputKind::kConstant, InputKind::kParameter, InputKind::kUserInput}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->input_kinds[0], InputKind::kCollectiveToken);
  EXPECT_EQ(a->input_kinds[1], InputKind::kParameter);
  ASSERT_EQ(a->collectives.size(), 1u);
  const Collective& c = a->collectives[0];
  EXPECT_EQ(c.op, "all_reduce");
  EXPECT_EQ(c.reduce, "sum");
  EXPECT_EQ(c.token_input, std::optional<int64_t>(0));
  EXPECT_EQ(c.token_operands, std::vector<int64_t>{1});
  EXPECT_EQ(c.operand_inputs, (std::vector<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(c.scale, 0.5);
  EXPECT_EQ(a->token_inputs, std::vector<int64_t>{0});
}

// The token's value does not matter, and a scalar constant that is NOT structurally a token
// (its all-reduce result is used) stays a constant.
TEST(AnalyzeTest, ScalarWhoseResultIsUsedIsNotAToken) {
  Builder b;
  const int64_t s = b.Arg({});
  const int64_t x = b.Arg({3});
  auto ar = b.Add("stablehlo.all_reduce", {x, s}, {{3}, {}}, "stablehlo.maximum");
  graph::Graph& g = b.Return({ar[0], ar[1]});
  auto a = Analyze(g, Declared({InputKind::kConstant, InputKind::kUserInput}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->input_kinds[0], InputKind::kConstant);
  EXPECT_FALSE(a->collectives[0].token_input.has_value());
  EXPECT_EQ(a->collectives[0].reduce, "max");
  EXPECT_DOUBLE_EQ(a->collectives[0].scale, 1.0);
  EXPECT_EQ(a->collectives[0].operand_inputs, (std::vector<int64_t>{0, 1}));
}

// Two all-reduces threading one token: the first's token result feeds the second.
TEST(AnalyzeTest, TokenChain) {
  Builder b;
  const int64_t token = b.Arg({});
  const int64_t x = b.Arg({4});
  const int64_t y = b.Arg({4});
  auto ar1 = b.Add("stablehlo.all_reduce", {x, token}, {{4}, {}}, "stablehlo.add");
  const int64_t two = b.Add("stablehlo.constant", {}, {{}}, "", 2.0)[0];
  const int64_t bcast = b.Add("stablehlo.broadcast_in_dim", {two}, {{4}})[0];
  const int64_t scaled = b.Add("stablehlo.multiply", {bcast, ar1[0]}, {{4}})[0];
  const int64_t sum = b.Add("stablehlo.add", {scaled, y}, {{4}})[0];
  auto ar2 = b.Add("stablehlo.all_reduce", {sum, ar1[1]}, {{4}, {}}, "stablehlo.minimum");
  graph::Graph& g = b.Return({ar2[0]});
  auto a = Analyze(g, Declared({InputKind::kConstant, InputKind::kUserInput, InputKind::kUserInput}));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->collectives.size(), 2u);
  EXPECT_EQ(a->collectives[0].token_input, std::optional<int64_t>(0));
  EXPECT_EQ(a->collectives[1].token_input, std::optional<int64_t>(0));
  EXPECT_DOUBLE_EQ(a->collectives[0].scale, 2.0);  // through broadcast_in_dim, either operand
  EXPECT_DOUBLE_EQ(a->collectives[1].scale, 1.0);
  EXPECT_EQ(a->collectives[1].reduce, "min");
  EXPECT_EQ(a->collectives[1].operand_inputs, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a->input_kinds[0], InputKind::kCollectiveToken);
}

// A scale multiply that is not the result's only use is not a scale.
TEST(AnalyzeTest, SharedResultHasNoScale) {
  Builder b;
  const int64_t token = b.Arg({});
  const int64_t x = b.Arg({4});
  auto ar = b.Add("stablehlo.all_reduce", {x, token}, {{4}, {}}, "stablehlo.add");
  const int64_t c = b.Add("stablehlo.constant", {}, {{4}}, "", 0.25)[0];
  const int64_t m = b.Add("stablehlo.multiply", {ar[0], c}, {{4}})[0];
  const int64_t s = b.Add("stablehlo.add", {m, ar[0]}, {{4}})[0];
  auto a = Analyze(b.Return({s}), Declared({InputKind::kConstant, InputKind::kUserInput}));
  ASSERT_TRUE(a.ok());
  EXPECT_DOUBLE_EQ(a->collectives[0].scale, 1.0);
  EXPECT_FALSE(a->collectives[0].scale_op_index.has_value());
}

// JAX's pmean: the psum divided by the axis size (a broadcast constant) is a scale of 1/size;
// a constant divided by the result is not.
TEST(AnalyzeTest, DivisionByAConstantIsAScale) {
  Builder b;
  const int64_t x = b.Arg({4});
  auto ar1 = b.Add("stablehlo.all_reduce", {x}, {{4}}, "stablehlo.add");
  const int64_t four = b.Add("stablehlo.constant", {}, {{}}, "", 4.0)[0];
  const int64_t bcast = b.Add("stablehlo.broadcast_in_dim", {four}, {{4}})[0];
  const int64_t mean = b.Add("stablehlo.divide", {ar1[0], bcast}, {{4}})[0];
  auto ar2 = b.Add("stablehlo.all_reduce", {x}, {{4}}, "stablehlo.add");
  const int64_t inverse = b.Add("stablehlo.divide", {bcast, ar2[0]}, {{4}})[0];
  const int64_t sum = b.Add("stablehlo.add", {mean, inverse}, {{4}})[0];
  auto a = Analyze(b.Return({sum}), Declared({InputKind::kUserInput}));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->collectives.size(), 2u);
  EXPECT_DOUBLE_EQ(a->collectives[0].scale, 0.25);
  EXPECT_EQ(a->collectives[0].scale_op_index, std::optional<int64_t>(3));
  EXPECT_DOUBLE_EQ(a->collectives[1].scale, 1.0);
  EXPECT_FALSE(a->collectives[1].scale_op_index.has_value());
}

// A scale held by a scalar constant argument (a lifted constant) is read from its declared value.
TEST(AnalyzeTest, ScaleFromConstantArgument) {
  Builder b;
  const int64_t token = b.Arg({});
  const int64_t k = b.Arg({});
  const int64_t x = b.Arg({4});
  auto ar = b.Add("stablehlo.all_reduce", {x, token}, {{4}, {}}, "stablehlo.add");
  const int64_t kb = b.Add("stablehlo.broadcast_in_dim", {k}, {{4}})[0];
  const int64_t m = b.Add("stablehlo.multiply", {ar[0], kb}, {{4}})[0];
  std::vector<DeclaredInput> d = Declared({InputKind::kConstant, InputKind::kConstant, InputKind::kUserInput});
  d[1].scalar_value = 0.125;
  auto a = Analyze(b.Return({m}), d);
  ASSERT_TRUE(a.ok());
  EXPECT_DOUBLE_EQ(a->collectives[0].scale, 0.125);
  EXPECT_EQ(a->input_kinds[1], InputKind::kConstant);
  EXPECT_EQ(a->input_kinds[0], InputKind::kCollectiveToken);
}

TEST(AnalyzeTest, UnusedArgumentsAndOtherCollectives) {
  Builder b;
  const int64_t x = b.Arg({4});
  b.Arg({7});  // unused
  const int64_t g = b.Add("stablehlo.all_gather", {x}, {{8}})[0];
  auto a = Analyze(b.Return({g}), Declared({InputKind::kUserInput, InputKind::kUserInput}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->input_used, (std::vector<bool>{true, false}));
  ASSERT_EQ(a->collectives.size(), 1u);
  EXPECT_EQ(a->collectives[0].op, "all_gather");
  EXPECT_EQ(a->collectives[0].reduce, "");
  EXPECT_TRUE(a->token_inputs.empty());
}

// torch_xla's all_gather: main(%token, %x); all_gather(x + broadcast(token)).
TEST(AnalyzeTest, TokenMixedIntoOperand) {
  Builder b;
  const int64_t token = b.Arg({});
  const int64_t x = b.Arg({4, 3});
  const int64_t bt = b.Add("stablehlo.broadcast_in_dim", {token}, {{4, 3}})[0];
  const int64_t sum = b.Add("stablehlo.add", {x, bt}, {{4, 3}})[0];
  const int64_t g = b.Add("stablehlo.all_gather", {sum}, {{8, 3}})[0];
  auto a = Analyze(b.Return({g}), Declared({InputKind::kConstant, InputKind::kUserInput}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->input_kinds[0], InputKind::kCollectiveToken);
  ASSERT_EQ(a->collectives.size(), 1u);
  EXPECT_EQ(a->collectives[0].token_input, std::optional<int64_t>(0));
  EXPECT_TRUE(a->collectives[0].token_mixed_into_operand);
  EXPECT_TRUE(a->collectives[0].token_operands.empty());
  EXPECT_EQ(a->collectives[0].operand_inputs, std::vector<int64_t>{1});
}

// The same add from a user input, or from a constant also used elsewhere, is data, not a token.
TEST(AnalyzeTest, AddedScalarWithOtherUsesIsNotAToken) {
  for (InputKind kind : {InputKind::kUserInput, InputKind::kConstant}) {
    Builder b;
    const int64_t s = b.Arg({});
    const int64_t x = b.Arg({4});
    const int64_t bs = b.Add("stablehlo.broadcast_in_dim", {s}, {{4}})[0];
    const int64_t sum = b.Add("stablehlo.add", {x, bs}, {{4}})[0];
    const int64_t g = b.Add("stablehlo.all_gather", {sum}, {{8}})[0];
    std::vector<int64_t> ret = {g};
    if (kind == InputKind::kConstant) ret.push_back(b.Add("stablehlo.negate", {s}, {{}})[0]);
    auto a = Analyze(b.Return(ret), Declared({kind, InputKind::kUserInput}));
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->input_kinds[0], kind);
    EXPECT_FALSE(a->collectives[0].token_input.has_value());
    EXPECT_EQ(a->collectives[0].operand_inputs, (std::vector<int64_t>{0, 1}));
  }
}

TEST(AnalyzeTest, RejectsMalformedGraphs) {
  graph::Graph g;
  g.values = {{{}, "f32"}};
  g.num_args = 1;
  g.ops.push_back({"stablehlo.add", {0, 5}, {}, "", {}, std::nullopt});
  auto a = Analyze(g, Declared({InputKind::kUserInput}));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("op 0 (stablehlo.add)"), std::string::npos);

  graph::Graph g2;
  g2.values = {{{}, "f32"}};
  g2.num_args = 1;
  auto a2 = Analyze(g2, Declared({}));
  ASSERT_FALSE(a2.ok());
  EXPECT_NE(a2.status().message().find("declared inputs"), std::string::npos);
}

TEST(NamesTest, KindsRoundTrip) {
  for (InputKind k : {InputKind::kUserInput, InputKind::kParameter, InputKind::kBuffer,
                      InputKind::kConstant, InputKind::kCollectiveToken}) {
    auto back = InputKindFromName(InputKindName(k));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, k);
  }
  EXPECT_FALSE(InputKindFromName("weights").ok());
  EXPECT_EQ(CollectiveName("stablehlo.reduce_scatter"), "reduce_scatter");
  EXPECT_EQ(CollectiveName("stablehlo.add"), "");
  EXPECT_EQ(ReduceName("stablehlo.and"), "and");
}

}  // namespace
}  // namespace txe::collectives
