#include "cc/jax_call/hlo_signature.h"

#include <string>
#include <vector>

#include "cc/jax_call/hlo_proto_testing.h"
#include "gtest/gtest.h"

namespace txe::jax_call {
namespace {

using testing::BytesField;
using testing::ProgramShape;
using testing::Shape;
using testing::Varint;
using testing::VarintField;
std::string Tuple(const std::vector<std::string>& elements) { return testing::TupleShape(elements); }

TEST(HloSignatureTest, ReadsHostProgramShape) {
  std::string module = BytesField(1, "jit_f") + BytesField(2, "main.9") +
                       BytesField(4, ProgramShape({Shape(PrimitiveType::kF32, {3, 4}),
                                                   Shape(PrimitiveType::kBF16, {}, /*packed=*/false),
                                                   Shape(PrimitiveType::kS64, {7}, /*packed=*/false)},
                                                  Tuple({Shape(PrimitiveType::kF32, {3}), Shape(PrimitiveType::kPred, {})}))) +
                       VarintField(6, 9) + "\x39" + std::string(8, '\0');  // field 7, fixed64: skipped
  auto sig = ReadHloSignature(module);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  EXPECT_EQ(sig->module_name, "jit_f");
  ASSERT_EQ(sig->parameters.size(), 3u);
  EXPECT_EQ(sig->parameters[0].ToString(), "f32[3,4]");
  EXPECT_EQ(sig->parameters[1].ToString(), "bf16[]");
  EXPECT_EQ(sig->parameters[2].ToString(), "s64[7]");
  EXPECT_EQ(sig->result.ToString(), "(f32[3], pred[])");
  ASSERT_EQ(sig->flat_results().size(), 2u);
}

TEST(HloSignatureTest, FallsBackToEntryComputationProgramShape) {
  std::string other = BytesField(1, "add") + BytesField(4, ProgramShape({}, Shape(PrimitiveType::kF32, {}))) + VarintField(5, 3);
  std::string entry = BytesField(1, "main") + BytesField(4, ProgramShape({Shape(PrimitiveType::kU8, {2})}, Shape(PrimitiveType::kU8, {2}))) +
                      VarintField(5, 4);
  std::string module = BytesField(1, "m") + BytesField(3, other) + BytesField(3, entry) + VarintField(6, 4);
  auto sig = ReadHloSignature(module);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  ASSERT_EQ(sig->parameters.size(), 1u);
  EXPECT_EQ(sig->parameters[0].ToString(), "u8[2]");
  EXPECT_EQ(sig->result.ToString(), "u8[2]");
}

TEST(HloSignatureTest, MalformedInputIsInvalidArgument) {
  EXPECT_EQ(ReadHloSignature("").status().code(), StatusCode::kInvalidArgument);
  // A length-delimited field that claims more bytes than remain.
  std::string truncated = Varint(4 << 3 | 2) + Varint(100) + "abc";
  auto r = ReadHloSignature(truncated);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("runs past the end"), std::string::npos) << r.status().message();
  // An unterminated varint.
  EXPECT_FALSE(ReadHloSignature(std::string("\x30\xff\xff", 3)).ok());
  // A module with no signature at all.
  auto none = ReadHloSignature(BytesField(1, "empty"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("'empty'"), std::string::npos);
}

TEST(HloSignatureTest, DynamicDimensionsArePrinted) {
  std::string shape = Shape(PrimitiveType::kF32, {8, 4}) + BytesField(6, std::string("\x01\x00", 2));
  auto sig = ReadHloSignature(BytesField(4, ProgramShape({shape}, Shape(PrimitiveType::kF32, {}))));
  ASSERT_TRUE(sig.ok());
  EXPECT_TRUE(sig->parameters[0].is_dynamic());
  EXPECT_EQ(sig->parameters[0].ToString(), "f32[<=8,4]");
}

TEST(HloSignatureTest, TypeNamesRoundTrip) {
  for (const char* name : {"f32", "bf16", "pred", "s64", "u8", "c64", "f8e4m3fn"}) {
    auto t = PrimitiveTypeFromName(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(PrimitiveTypeName(*t), name);
  }
  EXPECT_EQ(*PrimitiveTypeFromName("float32"), PrimitiveType::kF32);
  EXPECT_EQ(*PrimitiveTypeFromName("bool"), PrimitiveType::kPred);
  EXPECT_EQ(*PrimitiveTypeFromName("bfloat16"), PrimitiveType::kBF16);
  EXPECT_EQ(PrimitiveTypeFromName("complex32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PrimitiveTypeName(static_cast<PrimitiveType>(99)), "type<99>");
}

TEST(HloSignatureTest, TruncatedAndCorruptedBytesNeverCrash) {
  // Run under --config=asan: every prefix and every single-byte corruption of a valid module is
  // either read or rejected as InvalidArgument, never read out of bounds.
  const std::string module =
      BytesField(1, "jit_f") +
      BytesField(4, ProgramShape({Shape(PrimitiveType::kF32, {3, 4}), Tuple({Shape(PrimitiveType::kS8, {2})})},
                                 Tuple({Shape(PrimitiveType::kF32, {3}), Shape(PrimitiveType::kPred, {})})));
  ASSERT_TRUE(ReadHloSignature(module).ok());
  for (size_t n = 0; n < module.size(); ++n) {
    auto r = ReadHloSignature(module.substr(0, n));
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << n;
  }
  for (size_t i = 0; i < module.size(); ++i) {
    for (int v : {0x00, 0x7f, 0x80, 0xff}) {
      std::string corrupt = module;
      corrupt[i] = static_cast<char>(v);
      auto r = ReadHloSignature(corrupt);
      if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << i << " " << v;
    }
  }
}

}  // namespace
}  // namespace txe::jax_call
