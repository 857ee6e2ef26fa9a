#include "cc/graph/graph.h"

#include <gtest/gtest.h>

namespace txe::graph {
namespace {

// main(%0) { %1 = reduce(%0) ({ ^(%2, %3): %4 = add(%2, %3); return %4 }); return %1 }
Graph ReduceGraph() {
  Graph g;
  g.values = {{{4}, "bf16"}, {{}, "bf16"}, {{}, "bf16"}, {{}, "bf16"}, {{}, "bf16"}};
  g.num_args = 1;
  Op reduce;
  reduce.name = "stablehlo.reduce";
  reduce.operands = {0};
  reduce.results = {1};
  reduce.region_args = {2, 3};
  Op add;
  add.name = "stablehlo.add";
  add.operands = {2, 3};
  add.results = {4};
  add.parent = 0;
  Op ret;
  ret.name = "stablehlo.return";
  ret.operands = {4};
  ret.parent = 0;
  g.ops = {reduce, add, ret};
  g.returned = {1};
  return g;
}

TEST(GraphTest, NestedRegionsValidate) { EXPECT_TRUE(Validate(ReduceGraph()).ok()); }

TEST(GraphTest, UseBeforeDefinitionIsNamed) {
  Graph g = ReduceGraph();
  g.ops[1].operands = {2, 4};  // the add reads its own result
  Status s = Validate(g);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op 1 (stablehlo.add)"), std::string::npos) << s.message();
}

TEST(GraphTest, ParentMustComeFirst) {
  Graph g = ReduceGraph();
  g.ops[1].parent = 2;
  EXPECT_NE(Validate(g).message().find("not an earlier op"), std::string::npos);
}

TEST(GraphTest, RegionArgumentsDefinedOnce) {
  Graph g = ReduceGraph();
  g.ops[0].region_args = {2, 2};
  EXPECT_NE(Validate(g).message().find("defined twice"), std::string::npos);
}

TEST(GraphTest, DefUseChains) {
  Graph g = ReduceGraph();
  DefUse du(g);
  ASSERT_EQ(du.uses(4).size(), 1u);
  EXPECT_EQ(du.uses(4)[0].op, 2);
  EXPECT_EQ(du.def_op(4), 1);
  EXPECT_EQ(du.def_op(2), -1);  // a region argument
  ASSERT_EQ(du.uses(1).size(), 1u);
  EXPECT_EQ(du.uses(1)[0].op, -1);  // returned
}

TEST(GraphTest, Attributes) {
  Op op;
  op.attributes = {{"batching_dims", "2"}};
  ASSERT_NE(op.FindAttribute("batching_dims"), nullptr);
  EXPECT_EQ(*op.FindAttribute("batching_dims"), "2");
  EXPECT_EQ(op.FindAttribute("missing"), nullptr);
}

}  // namespace
}  // namespace txe::graph
