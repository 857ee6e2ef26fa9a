#include "cc/jax_call/hlo_signature.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cc/jax_call/hlo_proto_testing.h"
#include "gtest/gtest.h"

namespace txe::jax_call {
namespace {

// testdata/<name>.hlo.pb and .signature, written by testdata/make_goldens.py from jaxlib 0.7.1 and
// torch_xla 2.9.0: the expected signature is the producer's own print of its program shape.
std::string ReadTestdata(const std::string& file) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  std::string path = std::string(srcdir ? srcdir : ".") + "/" + (workspace ? workspace : "") + "/cc/jax_call/testdata/" + file;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenTest, SignatureIsWhatTheProducerPrints) {
  const std::string name = GetParam();
  auto sig = ReadHloSignature(ReadTestdata(name + ".hlo.pb"));
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  std::vector<std::string> expected = Lines(ReadTestdata(name + ".signature"));
  ASSERT_FALSE(expected.empty());
  const std::string result = expected.back().substr(3);  // "-> ..."
  expected.pop_back();
  std::vector<std::string> got;
  for (const ArrayType& p : sig->parameters) got.push_back(p.ToString());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(sig->result.ToString(), result);
  EXPECT_FALSE(sig->module_name.empty());
}

INSTANTIATE_TEST_SUITE_P(JaxlibAndTorchXla, GoldenTest,
                         ::testing::Values("jax_mixed", "jax_new_dtypes", "torch_xla_linear"));

TEST(HloSignatureTest, NewerMlDtypesDecodeByName) {
  auto sig = ReadHloSignature(ReadTestdata("jax_new_dtypes.hlo.pb"));
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  std::vector<std::string> numpy;
  for (const ArrayType& p : sig->parameters) numpy.push_back(PrimitiveTypeNumpyName(p.type));
  // ml_dtypes' names of the eight inputs make_goldens.py lowered, in order.
  EXPECT_EQ(numpy, (std::vector<std::string>{"int2", "uint2", "float8_e4m3", "float8_e3m4", "float4_e2m1fn",
                                             "float8_e8m0fnu", "int4", "float8_e4m3b11fnuz"}));
  for (const std::string& n : numpy) {
    auto t = PrimitiveTypeFromName(n);
    ASSERT_TRUE(t.ok()) << n;
    EXPECT_EQ(PrimitiveTypeNumpyName(*t), n);
  }
}

TEST(HloSignatureTest, FallsBackToEntryComputationProgramShape) {
  ::xla::HloModuleProto m;
  m.set_name("m");
  m.set_entry_computation_id(4);
  auto* other = m.add_computations();
  other->set_id(3);
  *other->mutable_program_shape()->mutable_result() = testing::Shape(::xla::F32, {});
  auto* entry = m.add_computations();
  entry->set_id(4);
  *entry->mutable_program_shape()->add_parameters() = testing::Shape(::xla::U8, {2});
  *entry->mutable_program_shape()->mutable_result() = testing::Shape(::xla::U8, {2});
  auto sig = ReadHloSignature(m);  // a fork passes its own message
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  ASSERT_EQ(sig->parameters.size(), 1u);
  EXPECT_EQ(sig->parameters[0].ToString(), "u8[2]");
  EXPECT_EQ(sig->result.ToString(), "u8[2]");
  EXPECT_EQ(ReadHloSignature(m.SerializeAsString())->result.ToString(), "u8[2]");
}

TEST(HloSignatureTest, MalformedInputIsInvalidArgument) {
  EXPECT_EQ(ReadHloSignature(std::string_view()).status().code(), StatusCode::kInvalidArgument);
  // A length-delimited field that claims more bytes than remain.
  auto r = ReadHloSignature(std::string("\x22\x64" "abc", 5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cannot parse as xla.HloModuleProto"), std::string::npos) << r.status().message();
  ::xla::HloModuleProto empty;
  empty.set_name("empty");
  auto none = ReadHloSignature(empty);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("'empty'"), std::string::npos);
}

TEST(HloSignatureTest, DynamicDimensionsArePrinted) {
  ::xla::ShapeProto shape = testing::Shape(::xla::F32, {8, 4});
  shape.add_is_dynamic_dimension(true);
  shape.add_is_dynamic_dimension(false);
  auto sig = ReadHloSignature(testing::HloModuleProto("d", {shape}, testing::Shape(::xla::F32, {})));
  ASSERT_TRUE(sig.ok());
  EXPECT_TRUE(sig->parameters[0].is_dynamic());
  EXPECT_EQ(sig->parameters[0].ToString(), "f32[<=8,4]");
}

TEST(HloSignatureTest, TypeNamesComeFromXlasEnum) {
  // Every type XLA's schema defines has a name that round-trips; HLO names are XLA's lowercase.
  const auto* d = ::xla::PrimitiveType_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const auto t = static_cast<PrimitiveType>(d->value(i)->number());
    if (t == ::xla::PRIMITIVE_TYPE_INVALID) continue;
    auto back = PrimitiveTypeFromName(PrimitiveTypeName(t));
    ASSERT_TRUE(back.ok()) << d->value(i)->name();
    EXPECT_EQ(*back, t);
  }
  EXPECT_EQ(*PrimitiveTypeFromName("float32"), ::xla::F32);
  EXPECT_EQ(*PrimitiveTypeFromName("bool"), ::xla::PRED);
  EXPECT_EQ(*PrimitiveTypeFromName("bfloat16"), ::xla::BF16);
  EXPECT_EQ(*PrimitiveTypeFromName("complex128"), ::xla::C128);
  EXPECT_EQ(PrimitiveTypeName(::xla::OPAQUE_TYPE), "opaque");
  EXPECT_EQ(PrimitiveTypeFromName("complex32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PrimitiveTypeName(static_cast<PrimitiveType>(99)), "type<99>");
}

TEST(HloSignatureTest, TruncatedAndCorruptedBytesNeverCrash) {
  // Run under --config=asan: every prefix and every single-byte corruption of a real module is
  // either read or rejected as InvalidArgument, never read out of bounds.
  const std::string module = ReadTestdata("jax_mixed.hlo.pb");
  ASSERT_TRUE(ReadHloSignature(module).ok());
  for (size_t n = 0; n < module.size(); n += 7) {
    auto r = ReadHloSignature(module.substr(0, n));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << n;
    }
  }
  for (size_t i = 0; i < module.size(); i += 3) {
    for (int v : {0x00, 0x7f, 0x80, 0xff}) {
      std::string corrupt = module;
      corrupt[i] = static_cast<char>(v);
      auto r = ReadHloSignature(corrupt);
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << i << " " << v;
      }
    }
  }
}

}  // namespace
}  // namespace txe::jax_call
