#include "cc/numerics/compare.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cc/numerics/float_bits.h"
#include "gtest/gtest.h"

namespace txe::numerics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TensorView View(const std::vector<double>& v) { return {v.data(), DType::kFloat64, {int64_t(v.size())}, {}}; }
TensorView View(const std::vector<float>& v) { return {v.data(), DType::kFloat32, {int64_t(v.size())}, {}}; }

CompareResult Cmp(const TensorView& a, const TensorView& e, double rtol, double atol,
                  bool equal_nan = false, int threads = 1) {
  auto r = Compare(a, e, {rtol, atol, equal_nan, threads});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : CompareResult{};
}

TEST(CompareTest, ToleranceRuleAndGreatestDifferences) {
  std::vector<double> e = {1.0, 2.0, 100.0, -4.0};
  std::vector<double> a = {1.0, 2.001, 100.05, -4.5};
  // atol + rtol*|e| = 1e-3 + 1e-3*|e|: 2.001 ok (3e-3 allowed), 100.05 ok (0.101), -4.5 not.
  CompareResult r = Cmp(View(a), View(e), 1e-3, 1e-3);
  EXPECT_EQ(r.total, 4);
  EXPECT_EQ(r.mismatched, 1);
  EXPECT_EQ(r.max_abs_index, 3);
  EXPECT_DOUBLE_EQ(r.max_abs_diff, 0.5);
  EXPECT_DOUBLE_EQ(r.max_rel_diff, 0.125);
  EXPECT_EQ(r.max_abs_index_all, 3);
  EXPECT_EQ(r.max_rel_index_all, 3);
}

TEST(CompareTest, MismatchedOnlyDiffersFromAll) {
  // The largest absolute difference (index 0) is within rtol; the mismatch is elsewhere.
  std::vector<double> e = {1000.0, 0.0};
  std::vector<double> a = {1000.5, 0.01};
  CompareResult r = Cmp(View(a), View(e), 1e-3, 1e-5);
  EXPECT_EQ(r.mismatched, 1);
  EXPECT_EQ(r.max_abs_index, 1);
  EXPECT_DOUBLE_EQ(r.max_abs_diff, 0.01);
  EXPECT_TRUE(std::isinf(r.max_rel_diff));  // 0.01 / |0|
  EXPECT_EQ(r.max_abs_index_all, 0);
}

TEST(CompareTest, NaNRules) {
  std::vector<double> e = {kNaN, kNaN, 1.0, 2.0};
  std::vector<double> a = {kNaN, 1.0, kNaN, 2.0};
  CompareResult strict = Cmp(View(a), View(e), 0, 0, /*equal_nan=*/false);
  EXPECT_EQ(strict.mismatched, 3);
  EXPECT_TRUE(std::isnan(strict.max_abs_diff));
  EXPECT_EQ(strict.max_abs_index, 0);  // first NaN wins
  EXPECT_EQ(strict.ulp_undefined, 3);
  EXPECT_EQ(strict.ulp_histogram[0], 1);

  CompareResult lenient = Cmp(View(a), View(e), 0, 0, /*equal_nan=*/true);
  EXPECT_EQ(lenient.mismatched, 2);
  EXPECT_EQ(lenient.max_abs_index, 1);
  EXPECT_EQ(lenient.ulp_undefined, 2);
  EXPECT_EQ(lenient.ulp_histogram[0], 2);
}

TEST(CompareTest, InfinityRules) {
  std::vector<double> e = {kInf, -kInf, kInf, 1.0, kInf};
  std::vector<double> a = {kInf, -kInf, -kInf, kInf, 1.0};
  CompareResult r = Cmp(View(a), View(e), 1e-3, 1e-3);
  // Equal infinities are close; an infinity against anything else never is, even though the
  // allowed error atol + rtol*inf is infinite.
  EXPECT_EQ(r.mismatched, 3);
  EXPECT_TRUE(std::isinf(r.max_abs_diff));
  EXPECT_EQ(r.max_abs_index, 2);
}

TEST(CompareTest, SignedZerosAndDenormals) {
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> e = {0.0f, -0.0f, denorm, denorm};
  std::vector<float> a = {-0.0f, 0.0f, 2 * denorm, -denorm};
  CompareResult exact = Cmp(View(a), View(e), 0, 0);
  EXPECT_EQ(exact.mismatched, 2);
  EXPECT_EQ(exact.ulp_histogram[0], 2);  // +0 and -0 are 0 ulp apart
  EXPECT_EQ(exact.max_ulp, 2u);          // -denorm .. +denorm crosses zero
  EXPECT_EQ(exact.max_ulp_index, 3);
  EXPECT_EQ(exact.ulp_histogram[1], 1);
  EXPECT_EQ(exact.ulp_histogram[2], 1);
  CompareResult loose = Cmp(View(a), View(e), 0, 1e-30);
  EXPECT_EQ(loose.mismatched, 0);
  EXPECT_EQ(loose.max_abs_index, -1);
  EXPECT_EQ(loose.max_abs_index_all, 3);
}

TEST(CompareTest, EmptyInput) {
  std::vector<float> none;
  TensorView v{nullptr, DType::kFloat32, {0, 3}, {}};
  CompareResult r = Cmp(v, v, 0, 0);
  EXPECT_EQ(r.total, 0);
  EXPECT_EQ(r.mismatched, 0);
  EXPECT_EQ(r.max_abs_index_all, -1);
}

TEST(CompareTest, ScalarRankZero) {
  float a = 1.0f, e = 1.5f;
  TensorView av{&a, DType::kFloat32, {}, {}}, ev{&e, DType::kFloat32, {}, {}};
  CompareResult r = Cmp(av, ev, 0, 0);
  EXPECT_EQ(r.total, 1);
  EXPECT_EQ(r.mismatched, 1);
  EXPECT_EQ(r.max_abs_index, 0);
}

TEST(CompareTest, ShapeMismatchIsInvalidArgument) {
  std::vector<float> a(6), e(6);
  TensorView av{a.data(), DType::kFloat32, {2, 3}, {}}, ev{e.data(), DType::kFloat32, {3, 2}, {}};
  auto r = Compare(av, ev, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "shape mismatch: actual (2, 3) vs expected (3, 2)");
}

TEST(CompareTest, BadArgumentsAreRejected) {
  std::vector<float> a(4);
  TensorView ok{a.data(), DType::kFloat32, {4}, {}};
  TensorView bad_strides{a.data(), DType::kFloat32, {4}, {1, 1}};
  TensorView null_data{nullptr, DType::kFloat32, {4}, {}};
  TensorView neg{a.data(), DType::kFloat32, {-4}, {}};
  EXPECT_EQ(Compare(bad_strides, ok, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Compare(ok, null_data, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Compare(neg, neg, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Compare(ok, ok, {-1.0, 0.0, false, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Compare(ok, ok, {kNaN, 0.0, false, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Compare(ok, ok, {0.0, 0.0, false, -2}).status().code(), StatusCode::kInvalidArgument);
}

TEST(CompareTest, ShapeAndStrideOverflowIsInvalidArgument) {
  // 2^32 * 2^32 elements wrap int64 to 0 without the check, which would report "equal" without
  // reading anything; the strides of a 2-element view can also point past any byte offset.
  std::vector<float> a(4);
  const int64_t big = int64_t{1} << 32;
  TensorView huge{a.data(), DType::kFloat32, {big, big}, {}};
  auto r = Compare(huge, huge, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("actual: shape (4294967296, 4294967296) has more elements"), std::string::npos)
      << r.status().message();
  TensorView wrapped{a.data(), DType::kFloat32, {2, big, big, 0}, {}};  // empty: nothing to count
  EXPECT_TRUE(Compare(wrapped, wrapped, {}).ok());
  TensorView far{a.data(), DType::kFloat32, {2}, {std::numeric_limits<int64_t>::max() / 2}};
  TensorView ok{a.data(), DType::kFloat32, {2}, {}};
  auto s = Compare(ok, far, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("expected: strides"), std::string::npos) << s.status().message();
  TensorView min_stride{a.data(), DType::kFloat32, {2}, {std::numeric_limits<int64_t>::min()}};
  EXPECT_EQ(Compare(min_stride, ok, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(CompareTest, StridedViewsMatchContiguousCopy) {
  // A 4x6 buffer; compare its transpose (6x4, strides {1, 6}) with a contiguous copy, and a
  // reversed view with a negative stride.
  std::vector<float> base(24);
  for (int i = 0; i < 24; ++i) base[i] = float(i) * 0.5f;
  std::vector<float> transposed(24);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) transposed[r * 4 + c] = base[c * 6 + r];
  transposed[2 * 4 + 3] += 1.0f;  // logical index (2, 3) -> flat 11
  TensorView strided{base.data(), DType::kFloat32, {6, 4}, {1, 6}};
  TensorView contiguous{transposed.data(), DType::kFloat32, {6, 4}, {}};
  for (int threads : {1, 2, 3, 7}) {
    CompareResult r = Cmp(strided, contiguous, 0, 0, false, threads);
    EXPECT_EQ(r.mismatched, 1) << threads;
    EXPECT_EQ(r.max_abs_index, 11) << threads;
  }
  std::vector<float> reversed(base.rbegin(), base.rend());
  TensorView neg{base.data() + 23, DType::kFloat32, {24}, {-1}};
  CompareResult r = Cmp(neg, View(reversed), 0, 0);
  EXPECT_EQ(r.mismatched, 0);
  // Broadcast (stride 0) view against a filled buffer.
  float one = 3.0f;
  std::vector<float> threes(5, 3.0f);
  TensorView bcast{&one, DType::kFloat32, {5}, {0}};
  EXPECT_EQ(Cmp(bcast, View(threes), 0, 0).mismatched, 0);
}

TEST(CompareTest, HalfTypesWidenExactlyAndCountUlpsInTheirOwnType) {
  // bfloat16 1.0 = 0x3f80; next up 0x3f81 = 1.0078125.
  std::vector<uint16_t> a = {0x3f80, 0x3f81, 0x3f84, 0x7fc0};
  std::vector<uint16_t> e = {0x3f80, 0x3f80, 0x3f80, 0x3f80};
  TensorView av{a.data(), DType::kBFloat16, {4}, {}}, ev{e.data(), DType::kBFloat16, {4}, {}};
  CompareResult r = Cmp(av, ev, 0, 0);
  EXPECT_EQ(r.ulp_dtype, DType::kBFloat16);
  EXPECT_EQ(r.mismatched, 3);
  EXPECT_EQ(r.max_ulp, 4u);
  EXPECT_EQ(r.max_ulp_index, 2);
  EXPECT_TRUE(std::isnan(r.max_abs_diff));
  EXPECT_EQ(r.ulp_undefined, 1);
  EXPECT_TRUE(std::isnan(r.max_abs_diff_all));

  // float16: 1.0 = 0x3c00, smallest subnormal 0x0001 = 2^-24, -2.0 = 0xc000, inf = 0x7c00.
  EXPECT_EQ(Float16ToFloat({0x3c00}), 1.0f);
  EXPECT_EQ(Float16ToFloat({0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(Float16ToFloat({0x03ff}), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Float16ToFloat({0xc000}), -2.0f);
  EXPECT_TRUE(std::isinf(Float16ToFloat({0x7c00})));
  EXPECT_TRUE(std::isnan(Float16ToFloat({0x7e00})));
  EXPECT_EQ(BFloat16ToFloat({0xc040}), -3.0f);
}

TEST(CompareTest, MixedDtypesPromoteForUlps) {
  std::vector<uint16_t> a = {0x3f80};  // bf16 1.0
  std::vector<float> e = {std::nextafter(1.0f, 2.0f)};
  TensorView av{a.data(), DType::kBFloat16, {1}, {}};
  CompareResult r = Cmp(av, View(e), 0, 0);
  EXPECT_EQ(r.ulp_dtype, DType::kFloat32);
  EXPECT_EQ(r.max_ulp, 1u);
  EXPECT_EQ(PromoteTypes(DType::kBFloat16, DType::kFloat16), DType::kFloat32);
  EXPECT_EQ(PromoteTypes(DType::kFloat16, DType::kFloat64), DType::kFloat64);
}

TEST(CompareTest, UlpBuckets) {
  EXPECT_EQ(UlpBucket(0), 0);
  EXPECT_EQ(UlpBucket(1), 1);
  EXPECT_EQ(UlpBucket(3), 2);
  EXPECT_EQ(UlpBucket(4), 3);
  EXPECT_EQ(UlpBucket(1023), 10);
  EXPECT_EQ(UlpBucket(1024), 11);
  EXPECT_EQ(UlpBucket(~uint64_t{0}), 11);
  EXPECT_EQ(UlpBucketLabel(0), "0");
  EXPECT_EQ(UlpBucketLabel(3), "4-7");
  EXPECT_EQ(UlpBucketLabel(11), ">=1024");
  // Opposite-signed extremes of float64 do not overflow.
  std::vector<double> a = {-std::numeric_limits<double>::max()}, e = {std::numeric_limits<double>::max()};
  EXPECT_EQ(Cmp(View(a), View(e), 0, 0).max_ulp, 2 * 0x7fefffffffffffffull);
}

TEST(CompareTest, ThreadSplitGivesTheSameAnswer) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n;
  const int64_t size = 300001;
  std::vector<float> e(size), a(size);
  for (int64_t i = 0; i < size; ++i) {
    e[i] = n(rng);
    a[i] = e[i] + (i % 997 == 0 ? 1e-3f : 0.0f);
  }
  a[1234] = std::numeric_limits<float>::quiet_NaN();
  CompareResult one = Cmp(View(a), View(e), 1e-5, 1e-5, false, 1);
  for (int t : {2, 5, 16}) {
    CompareResult many = Cmp(View(a), View(e), 1e-5, 1e-5, false, t);
    EXPECT_EQ(many.mismatched, one.mismatched);
    EXPECT_EQ(many.max_abs_index, one.max_abs_index);
    EXPECT_EQ(many.max_rel_index, one.max_rel_index);
    EXPECT_EQ(many.max_ulp, one.max_ulp);
    EXPECT_EQ(many.max_ulp_index, one.max_ulp_index);
    EXPECT_EQ(many.ulp_histogram, one.ulp_histogram);
    EXPECT_EQ(many.num_threads, t);
  }
  EXPECT_EQ(one.max_abs_index, 1234);
  EXPECT_GT(one.mismatched, 300);
}

}  // namespace
}  // namespace txe::numerics
