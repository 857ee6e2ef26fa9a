#include "cc/parity/hlo_graph.h"

#include <string>

#include "gtest/gtest.h"

namespace txe::parity {
namespace {

// Abridged from torch_xla 2.9's lowering of a scanned bf16 nn.Linear (XLAPatchedLinear).
constexpr char kScanLinear[] = R"(HloModule IrToHlo.110, entry_computation_layout={(bf16[128]{0}, bf16[128,128]{1,0}, bf16[3,128]{1,0})->(bf16[3,128]{1,0})}

%FnComputation.26 (p0.29: bf16[128], p1.35: bf16[128,128], p2.41: bf16[3,128]) -> (bf16[3,128], bf16[3,128]) {
  %p2.41 = bf16[3,128]{1,0} parameter(2)
  %p1.35 = bf16[128,128]{1,0} parameter(1)
  %dot.46 = bf16[3,128]{1,0} dot(bf16[3,128]{1,0} %p2.41, bf16[128,128]{1,0} %p1.35), lhs_contracting_dims={1}, rhs_contracting_dims={1}, frontend_attributes={grad_x="false",grad_y="false"}
  %transpose.47 = bf16[3,128]{1,0} transpose(bf16[3,128]{1,0} %dot.46), dimensions={0,1}
  %p0.29 = bf16[128]{0} parameter(0)
  %constant.27 = bf16[] constant(1)
  %broadcast.48 = bf16[128]{0} broadcast(bf16[] %constant.27), dimensions={}
  %multiply.49 = bf16[128]{0} multiply(bf16[128]{0} %p0.29, bf16[128]{0} %broadcast.48)
  %broadcast.50 = bf16[3,128]{1,0} broadcast(bf16[128]{0} %multiply.49), dimensions={1}
  %add.51 = bf16[3,128]{1,0} add(bf16[3,128]{1,0} %transpose.47, bf16[3,128]{1,0} %broadcast.50)
  ROOT %tuple.52 = (bf16[3,128]{1,0}, bf16[3,128]{1,0}) tuple(bf16[3,128]{1,0} %add.51, bf16[3,128]{1,0} %p2.41)
}

ENTRY %IrToHlo.110 (p0.6: bf16[128], p1.7: bf16[128,128], p2.8: bf16[3,128]) -> (bf16[3,128]) {
  %p0.6 = bf16[128]{0} parameter(0)
  %p1.7 = bf16[128,128]{1,0} parameter(1)
  %p2.8 = bf16[3,128]{1,0} parameter(2)
  %call.9 = (bf16[3,128]{1,0}, bf16[3,128]{1,0}) call(bf16[128]{0} %p0.6, bf16[128,128]{1,0} %p1.7, /*index=2*/bf16[3,128]{1,0} %p2.8), to_apply=%FnComputation.26
  %get-tuple-element.10 = bf16[3,128]{1,0} get-tuple-element((bf16[3,128]{1,0}, bf16[3,128]{1,0}) %call.9), index=0
  ROOT %tuple.11 = (bf16[3,128]{1,0}) tuple(bf16[3,128]{1,0} %get-tuple-element.10)
}
)";

TEST(ParseHloTextTest, ComputationsInstructionsShapesAndAttributes) {
  auto parsed = ParseHloText(kScanLinear);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const HloModule& m = *parsed;
  EXPECT_EQ(m.name, "IrToHlo.110");
  ASSERT_EQ(m.computations.size(), 2u);
  EXPECT_EQ(m.entry_computation().name, "IrToHlo.110");
  EXPECT_TRUE(m.entry_computation().is_entry);
  EXPECT_EQ(m.entry_computation().root, "tuple.11");

  const HloComputation* fn = m.FindComputation("%FnComputation.26");
  ASSERT_NE(fn, nullptr);
  const HloInstruction* dot = fn->Find("dot.46");
  ASSERT_NE(dot, nullptr);
  EXPECT_EQ(dot->opcode, "dot");
  EXPECT_EQ(dot->shape.ToString(), "bf16[3,128]");
  EXPECT_EQ(dot->operands, (std::vector<std::string>{"p2.41", "p1.35"}));
  ASSERT_NE(dot->FindAttribute("lhs_contracting_dims"), nullptr);
  EXPECT_EQ(*dot->FindAttribute("lhs_contracting_dims"), "{1}");
  // A quoted attribute with commas stays one value.
  EXPECT_EQ(*dot->FindAttribute("frontend_attributes"), "{grad_x=\"false\",grad_y=\"false\"}");

  const HloInstruction* call = m.entry_computation().Find("call.9");
  ASSERT_NE(call, nullptr);
  EXPECT_TRUE(call->shape.is_tuple());
  EXPECT_EQ(call->shape.ToString(), "(bf16[3,128], bf16[3,128])");
  EXPECT_EQ(call->operands.size(), 3u);  // the /*index=2*/ comment is dropped
  EXPECT_EQ(*call->FindAttribute("to_apply"), "%FnComputation.26");

  const HloInstruction* c = fn->Find("constant.27");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->literal, "1");
  EXPECT_TRUE(c->shape.dims.empty());
  EXPECT_EQ(fn->Find("p1.35")->literal, "1");
  EXPECT_TRUE(fn->Find("tuple.52")->is_root);
}

TEST(FindRoundingPointsTest, DotThenAddInBf16RoundsTwice) {
  auto m = ParseHloText(kScanLinear);
  ASSERT_TRUE(m.ok());
  std::vector<RoundingPoint> points = FindRoundingPoints(*m);
  ASSERT_EQ(points.size(), 3u);  // dot.46, multiply.49, add.51
  EXPECT_EQ(points[0].instruction, "dot.46");
  EXPECT_EQ(points[0].after, "");
  EXPECT_EQ(points[1].instruction, "multiply.49");
  EXPECT_EQ(points[1].after, "");  // its operands are a parameter and a broadcast constant
  EXPECT_EQ(points[2].instruction, "add.51");
  EXPECT_EQ(points[2].after, "dot.46");  // through transpose.47
  EXPECT_EQ(points[2].after_opcode, "dot");
  EXPECT_EQ(points[2].element_type, "bf16");
  EXPECT_EQ(points[2].computation, "FnComputation.26");
}

TEST(FindRoundingPointsTest, F32ProgramHasNone) {
  std::string f32 = kScanLinear;
  for (size_t p; (p = f32.find("bf16")) != std::string::npos;) f32.replace(p, 4, "f32");
  auto m = ParseHloText(f32);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(FindRoundingPoints(*m).empty());
}

TEST(ParseHloTextTest, ErrorsNameTheLine) {
  auto no_entry = ParseHloText("HloModule m\n%c (p: f32[]) -> f32[] {\n  ROOT %p = f32[] parameter(0)\n}\n");
  ASSERT_FALSE(no_entry.ok());
  EXPECT_EQ(no_entry.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_entry.status().message().find("no ENTRY"), std::string::npos);

  auto bad = ParseHloText("HloModule m\nENTRY %e () -> f32[] {\n  %x = f32[2 add(%a)\n}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();

  auto open = ParseHloText("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1)\n");
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("ends inside computation 'e'"), std::string::npos);
}

TEST(ParseHloTextTest, DynamicDimensionsAndScalars) {
  auto m = ParseHloText(
      "HloModule m\nENTRY %e (p: f32[<=8,3]) -> s64[] {\n  %p = f32[<=8,3]{1,0} parameter(0)\n"
      "  ROOT %c = s64[] constant(7)\n}\n");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->entry_computation().Find("p")->shape.dims, (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(m->entry_computation().Find("c")->shape.ToString(), "s64[]");
}

}  // namespace
}  // namespace txe::parity

namespace txe::parity {
namespace {

// torch_xla's lowering of bf16 (x * 1.7 + 0.3) * x: the bf16 add is only converted to f32, so
// with excess precision XLA computes it in f32 and it does not round.
constexpr char kWidened[] = R"(HloModule m
ENTRY %e (p0: bf16[4], p1: f32[], p2: bf16[]) -> bf16[4] {
  %p0 = bf16[4]{0} parameter(0)
  %convert.1 = f32[4]{0} convert(bf16[4]{0} %p0)
  %p1 = f32[] parameter(1)
  %broadcast.2 = f32[4]{0} broadcast(f32[] %p1), dimensions={}
  %multiply.3 = f32[4]{0} multiply(f32[4]{0} %convert.1, f32[4]{0} %broadcast.2)
  %convert.4 = bf16[4]{0} convert(f32[4]{0} %multiply.3)
  %p2 = bf16[] parameter(2)
  %broadcast.5 = bf16[4]{0} broadcast(bf16[] %p2), dimensions={}
  %add.6 = bf16[4]{0} add(bf16[4]{0} %convert.4, bf16[4]{0} %broadcast.5)
  %convert.7 = f32[4]{0} convert(bf16[4]{0} %add.6)
  %multiply.8 = f32[4]{0} multiply(f32[4]{0} %convert.7, f32[4]{0} %convert.1)
  ROOT %convert.9 = bf16[4]{0} convert(f32[4]{0} %multiply.8)
}
)";

TEST(FindRoundingPointsTest, ExcessPrecisionDropsOpsOnlyConvertedToF32) {
  auto m = ParseHloText(kWidened);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(FindRoundingPoints(*m).empty());
  RoundingPointOptions strict;
  strict.excess_precision = false;
  std::vector<RoundingPoint> points = FindRoundingPoints(*m, strict);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].instruction, "add.6");
}

}  // namespace
}  // namespace txe::parity
