#include "cc/jax_call/param_mapping.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace txe::jax_call {
namespace {

ArrayType Arr(PrimitiveType t, std::vector<int64_t> dims) {
  ArrayType a;
  a.type = t;
  a.dims = std::move(dims);
  return a;
}

HloSignature Sig(std::vector<ArrayType> params) {
  HloSignature s;
  s.module_name = "jit_f";
  s.parameters = std::move(params);
  s.result = Arr(PrimitiveType::F32, {3});
  return s;
}

Leaf Tensor(std::string path, std::string dtype, std::vector<int64_t> shape) {
  return Leaf{std::move(path), LeafKind::kTensor, std::move(dtype), std::move(shape), ""};
}
Leaf Static(std::string path, std::string value) { return Leaf{std::move(path), LeafKind::kStatic, "", {}, std::move(value)}; }

TEST(ParamMappingTest, MapsKeptLeavesAndSkipsUnusedAndStatics) {
  std::vector<Leaf> leaves = {Tensor("args[0]", "float32", {3}), Static("args[1]", "2"),
                              Tensor("args[2]['w']", "bfloat16", {2, 2}), Tensor("kwargs['b']", "float32", {3})};
  // Tensor leaves in flat order: args[0] (0), args[2]['w'] (1), kwargs['b'] (2); only 0 and 2 kept.
  auto m = BuildParamMapping(leaves, {}, {0, 2}, Sig({Arr(PrimitiveType::F32, {3}), Arr(PrimitiveType::F32, {3})}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->num_hlo_params(), 2);
  EXPECT_EQ(m->rows[0].hlo_param, 0);
  EXPECT_TRUE(m->rows[0].kept);
  EXPECT_FALSE(m->rows[1].kept);
  EXPECT_EQ(m->rows[1].kind, LeafKind::kStatic);
  EXPECT_FALSE(m->rows[2].kept);
  EXPECT_EQ(m->rows[2].hlo_param, -1);
  EXPECT_EQ(m->rows[3].hlo_param, 1);
  ASSERT_EQ(m->sources.size(), 2u);
  EXPECT_EQ(m->sources[1].index, 3);
  std::string table = m->ToTable();
  EXPECT_NE(table.find("args[2]['w']  tensor  no    -"), std::string::npos) << table;
  EXPECT_NE(table.find("2 parameters (0 hoisted constants, 2 kept leaves)"), std::string::npos) << table;
}

TEST(ParamMappingTest, HoistedConstantsComeFirst) {
  std::vector<Leaf> leaves = {Tensor("args[0]", "float32", {3}), Tensor("args[1]", "float32", {3})};
  std::vector<ConstantSpec> constants = {{"float32", {3}}};
  // JAX shifts the leaves' indices by the number of constants: 0 is the constant, 2 is args[1].
  auto m = BuildParamMapping(leaves, constants, {0, 2}, Sig({Arr(PrimitiveType::F32, {3}), Arr(PrimitiveType::F32, {3})}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->constants[0].hlo_param, 0);
  EXPECT_EQ(m->sources[0].kind, ParamSource::Kind::kConstant);
  EXPECT_FALSE(m->rows[0].kept);
  EXPECT_EQ(m->rows[1].hlo_param, 1);
  EXPECT_NE(m->ToTable().find("<constant 0>"), std::string::npos);
}

TEST(ParamMappingTest, ErrorsNameTheLeafPath) {
  std::vector<Leaf> leaves = {Tensor("args[0]", "float32", {3}), Tensor("args[1]['w']", "int64", {4, 3})};
  auto shape = BuildParamMapping(leaves, {}, {0, 1}, Sig({Arr(PrimitiveType::F32, {3}), Arr(PrimitiveType::S64, {3, 4})}));
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shape.status().message(), "args[1]['w']: HLO parameter 1 is s64[3,4] but the leaf is s64[4,3]");

  auto dtype = BuildParamMapping(leaves, {}, {0, 1}, Sig({Arr(PrimitiveType::F32, {3}), Arr(PrimitiveType::S32, {4, 3})}));
  ASSERT_FALSE(dtype.ok());
  EXPECT_EQ(dtype.status().message(), "args[1]['w']: HLO parameter 1 is s32[4,3] but the leaf is s64[4,3]");

  auto count = BuildParamMapping(leaves, {}, {1}, Sig({Arr(PrimitiveType::F32, {3}), Arr(PrimitiveType::S64, {4, 3})}));
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().message(), "HLO module 'jit_f' has 2 parameters but 1 inputs are kept [args[1]['w']]");

  auto unsupported = BuildParamMapping({Tensor("kwargs['q']", "complex32", {2})}, {}, {0}, Sig({}));
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.status().message(), "kwargs['q']: unsupported dtype 'complex32'");
}

TEST(ParamMappingTest, RejectsBadKeptVarIdxAndTupleParams) {
  std::vector<Leaf> leaves = {Tensor("args[0]", "float32", {3})};
  EXPECT_EQ(BuildParamMapping(leaves, {}, {1}, Sig({})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildParamMapping(leaves, {{"float32", {3}}}, {1}, Sig({Arr(PrimitiveType::F32, {3})})).status().code(),
            StatusCode::kInvalidArgument);  // the constant must be kept
  ArrayType tuple;
  tuple.type = PrimitiveType::TUPLE;
  tuple.tuple = {Arr(PrimitiveType::F32, {3})};
  auto t = BuildParamMapping(leaves, {}, {0}, Sig({tuple}));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("args[0]"), std::string::npos);
}

TEST(ParamMappingTest, CheckOutputsNamesTheOutputPath) {
  HloSignature sig = Sig({Arr(PrimitiveType::F32, {3})});
  ArrayType tuple;
  tuple.type = PrimitiveType::TUPLE;
  tuple.tuple = {Arr(PrimitiveType::F32, {3}), Arr(PrimitiveType::S32, {})};
  sig.result = tuple;
  auto m = BuildParamMapping({Tensor("args[0]", "float32", {3})}, {}, {0}, sig);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(CheckOutputs(*m, {Tensor("output['y']", "float32", {3}), Tensor("output['n']", "int32", {})}).ok());
  Status wrong = CheckOutputs(*m, {Tensor("output['y']", "float32", {3}), Tensor("output['n']", "float32", {})});
  EXPECT_EQ(wrong.message(), "output['n']: HLO output 1 is s32[] but the traced output is f32[]");
  Status count = CheckOutputs(*m, {Tensor("output['y']", "float32", {3})});
  EXPECT_EQ(count.message(), "HLO module 'jit_f' returns 2 values but the function returned 1 array leaves");
}

}  // namespace
}  // namespace txe::jax_call
