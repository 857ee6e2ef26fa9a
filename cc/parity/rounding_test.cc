#include "cc/parity/rounding.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace txe::parity {
namespace {

using graph::Graph;
using graph::Op;

// Builds a flat or nested graph op by op; values get ids in creation order.
class Builder {
 public:
  int64_t Arg(std::string et) {
    g_.values.push_back({{2}, std::move(et)});
    return g_.num_args++;
  }
  int64_t Value(std::string et) {
    g_.values.push_back({{2}, std::move(et)});
    return static_cast<int64_t>(g_.values.size()) - 1;
  }
  // Returns the op's first result (or -1 without results).
  int64_t Add(std::string name, std::vector<int64_t> operands, std::vector<std::string> result_types,
              int64_t parent = -1, std::vector<std::pair<std::string, std::string>> attrs = {}) {
    Op op;
    op.name = std::move(name);
    op.operands = std::move(operands);
    op.parent = parent;
    op.attributes = std::move(attrs);
    for (auto& et : result_types) op.results.push_back(Value(et));
    g_.ops.push_back(op);
    return op.results.empty() ? -1 : op.results[0];
  }
  int64_t last_op() const { return static_cast<int64_t>(g_.ops.size()) - 1; }
  Op& op(int64_t i) { return g_.ops[i]; }
  Graph& Return(std::vector<int64_t> values) {
    g_.returned = std::move(values);
    return g_;
  }

 private:
  Graph g_;
};

// torch_xla's bf16 nn.Linear: dot, then a bias add through a broadcast: two roundings in a row.
TEST(RoundingTest, DotThenAddIsADoubleRounding) {
  Builder b;
  const int64_t x = b.Arg("bf16"), w = b.Arg("bf16"), bias = b.Arg("bf16");
  const int64_t t = b.Add("stablehlo.transpose", {w}, {"bf16"});
  const int64_t dot = b.Add("stablehlo.dot", {x, t}, {"bf16"});
  const int64_t dot_op = b.last_op();
  const int64_t bb = b.Add("stablehlo.broadcast_in_dim", {bias}, {"bf16"});
  const int64_t add = b.Add("stablehlo.add", {dot, bb}, {"bf16"});
  const int64_t add_op = b.last_op();
  StatusOr<RoundingAnalysis> r = FindRoundingPoints(b.Return({add}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->points.size(), 2u);
  EXPECT_EQ(r->points[0].op, dot_op);
  EXPECT_EQ(r->points[0].after, -1);
  EXPECT_EQ(r->points[1].op, add_op);
  EXPECT_EQ(r->points[1].after, dot_op);
  EXPECT_EQ(r->points[1].element_type, "bf16");
}

// (x * 1.7 + 0.3) * x as torch_xla lowers it: the bf16 add's only user converts it to f32, so
// XLA keeps it in f32 (excess precision); the explicit f32 -> bf16 convert still rounds.
TEST(RoundingTest, ExcessPrecisionWhenEveryUseWidens) {
  Builder b;
  const int64_t x = b.Arg("bf16"), s = b.Arg("f32"), c = b.Arg("bf16");
  const int64_t xf = b.Add("stablehlo.convert", {x}, {"f32"});
  const int64_t m = b.Add("stablehlo.multiply", {xf, s}, {"f32"});
  const int64_t mb = b.Add("stablehlo.convert", {m}, {"bf16"});
  const int64_t convert_op = b.last_op();
  const int64_t add = b.Add("stablehlo.add", {mb, c}, {"bf16"});
  const int64_t add_op = b.last_op();
  const int64_t af = b.Add("stablehlo.convert", {add}, {"f32"});
  const int64_t out = b.Add("stablehlo.convert", {b.Add("stablehlo.multiply", {af, xf}, {"f32"})}, {"bf16"});
  Graph g = b.Return({out});

  StatusOr<RoundingAnalysis> r = FindRoundingPoints(g);
  ASSERT_TRUE(r.ok());
  std::vector<int64_t> ops;
  for (const RoundingPoint& p : r->points) ops.push_back(p.op);
  EXPECT_EQ(ops, (std::vector<int64_t>{convert_op, b.last_op()}));
  EXPECT_EQ(r->kept_unrounded, (std::vector<int64_t>{add_op}));

  RoundingOptions strict;
  strict.excess_precision = false;
  StatusOr<RoundingAnalysis> s2 = FindRoundingPoints(g, strict);
  ASSERT_TRUE(s2.ok());
  ASSERT_EQ(s2->points.size(), 3u);
  EXPECT_EQ(s2->points[1].op, add_op);
  EXPECT_EQ(s2->points[1].after, convert_op);
  EXPECT_TRUE(s2->kept_unrounded.empty());
}

// Per use: a widening convert reads the unrounded value, another user the rounded one.
TEST(RoundingTest, ExcessPrecisionIsPerUse) {
  Builder b;
  const int64_t x = b.Arg("bf16");
  const int64_t t = b.Add("stablehlo.tanh", {x}, {"bf16"});
  const int64_t tanh_op = b.last_op();
  const int64_t wide = b.Add("stablehlo.convert", {t}, {"f32"});
  const int64_t wide_op = b.last_op();
  const int64_t sq = b.Add("stablehlo.multiply", {t, t}, {"bf16"});
  StatusOr<RoundingAnalysis> r = FindRoundingPoints(b.Return({wide, sq}));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->points.size(), 2u);
  ASSERT_EQ(r->points[0].op, tanh_op);
  ASSERT_EQ(r->points[0].unrounded_uses.size(), 1u);
  EXPECT_EQ(r->points[0].unrounded_uses[0].op, wide_op);
  EXPECT_EQ(r->points[1].after, tanh_op);  // the multiply reads the rounded tanh
}

// Dots without batch dimensions and convolutions keep excess precision; batched dots, reduces
// and explicit converts do not.
TEST(RoundingTest, ExcessPrecisionProducers) {
  auto named = [](std::string name) {
    Op op;
    op.name = std::move(name);
    return op;
  };
  Op dot = named("stablehlo.dot"), conv = named("stablehlo.convolution"), erf = named("chlo.erf");
  Op flat = named("stablehlo.dot_general"), batched = named("stablehlo.dot_general");
  flat.attributes = {{"batching_dims", "0"}};
  batched.attributes = {{"batching_dims", "1"}};
  EXPECT_TRUE(KeepsExcessPrecision(dot));
  EXPECT_TRUE(KeepsExcessPrecision(conv));
  EXPECT_TRUE(KeepsExcessPrecision(flat));
  EXPECT_TRUE(KeepsExcessPrecision(erf));
  EXPECT_FALSE(KeepsExcessPrecision(batched));
  EXPECT_FALSE(KeepsExcessPrecision(named("stablehlo.reduce")));
  EXPECT_FALSE(KeepsExcessPrecision(named("stablehlo.convert")));
}

// A bf16 reduce rounds at every step of its body and at its result; data movement and exact ops
// never round; f32 ops are not narrow.
TEST(RoundingTest, ReductionBodiesRoundAndMovesDoNot) {
  Builder b;
  const int64_t x = b.Arg("bf16"), init = b.Arg("bf16"), f = b.Arg("f32");
  const int64_t red = b.Add("stablehlo.reduce", {x, init}, {"bf16"});
  const int64_t reduce_op = b.last_op();
  const int64_t a0 = b.Value("bf16"), a1 = b.Value("bf16");
  b.op(reduce_op).region_args = {a0, a1};
  const int64_t sum = b.Add("stablehlo.add", {a0, a1}, {"bf16"}, reduce_op);
  const int64_t body_add = b.last_op();
  b.Add("stablehlo.return", {sum}, {}, reduce_op);
  const int64_t r2 = b.Add("stablehlo.reshape", {red}, {"bf16"});
  const int64_t mx = b.Add("stablehlo.maximum", {r2, r2}, {"bf16"});
  const int64_t ff = b.Add("stablehlo.multiply", {f, f}, {"f32"});
  StatusOr<RoundingAnalysis> r = FindRoundingPoints(b.Return({mx, ff}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<int64_t> ops;
  for (const RoundingPoint& p : r->points) ops.push_back(p.op);
  EXPECT_EQ(ops, (std::vector<int64_t>{reduce_op, body_add}));
}

TEST(RoundingTest, Classification) {
  EXPECT_EQ(Classify("stablehlo.gather"), OpClass::kMovesData);
  EXPECT_EQ(Classify("func.call"), OpClass::kMovesData);
  EXPECT_EQ(Classify("stablehlo.maximum"), OpClass::kExact);
  EXPECT_EQ(Classify("stablehlo.constant"), OpClass::kOpaque);
  EXPECT_EQ(Classify("stablehlo.batch_norm_training"), OpClass::kComputes);
  EXPECT_EQ(Classify("stablehlo.some_future_op"), OpClass::kComputes);  // conservative
}

TEST(RoundingTest, MalformedGraphIsInvalidArgument) {
  Builder b;
  b.Arg("bf16");
  b.Add("stablehlo.add", {0, 7}, {"bf16"});
  StatusOr<RoundingAnalysis> r = FindRoundingPoints(b.Return({}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("stablehlo.add"), std::string::npos);
}

}  // namespace
}  // namespace txe::parity
