// One-pass comparison of two floating-point buffers with torch.testing's closeness rule:
//   |actual - expected| <= atol + rtol * |expected|, with torch.isclose's NaN and inf rules.
// Reports the mismatch count, the greatest absolute / relative difference and where, ULP
// distances in the promoted dtype, and a histogram of them. Work is split over threads;
// memory use does not grow with the input.
#ifndef TXE_CC_NUMERICS_COMPARE_H_
#define TXE_CC_NUMERICS_COMPARE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cc/common/status.h"

namespace txe::numerics {

enum class DType : int { kFloat64 = 0, kFloat32 = 1, kBFloat16 = 2, kFloat16 = 3 };

const char* DTypeName(DType dtype);
int DTypeSize(DType dtype);
// torch.promote_types over the four floating dtypes (bfloat16 with float16 gives float32).
DType PromoteTypes(DType a, DType b);

// A read-only view of a strided buffer. Strides are in elements and may be negative or zero;
// empty strides mean contiguous row-major.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

struct CompareOptions {
  double rtol = 0.0;
  double atol = 0.0;
  bool equal_nan = false;
  int num_threads = 0;  // 0: chosen from the input size and the machine.
};

// Histogram of ULP distances: bucket 0 holds distance 0, bucket b in [1, 10] holds
// [2^(b-1), 2^b - 1], and the last bucket holds >= 1024.
inline constexpr int kUlpBuckets = 12;
std::string UlpBucketLabel(int bucket);
int UlpBucket(uint64_t distance);

struct CompareResult {
  int64_t total = 0;
  int64_t mismatched = 0;
  // Greatest differences among mismatched elements, as torch.testing reports them
  // (index -1 when nothing mismatches). NaN outranks every number, first occurrence wins.
  double max_abs_diff = 0.0;
  int64_t max_abs_index = -1;
  double max_rel_diff = 0.0;
  int64_t max_rel_index = -1;
  // The same over every element (index -1 only when the input is empty).
  double max_abs_diff_all = 0.0;
  int64_t max_abs_index_all = -1;
  double max_rel_diff_all = 0.0;
  int64_t max_rel_index_all = -1;
  // ULP distances in `ulp_dtype` over pairs where it is defined (neither side NaN, or both NaN
  // with equal_nan, which counts as 0). `ulp_undefined` counts the other pairs.
  DType ulp_dtype = DType::kFloat32;
  uint64_t max_ulp = 0;
  int64_t max_ulp_index = -1;
  int64_t ulp_undefined = 0;
  std::array<int64_t, kUlpBuckets> ulp_histogram{};
  int num_threads = 1;
};

// Flat indices in the result are row-major positions in `shape`, whatever the strides.
StatusOr<CompareResult> Compare(const TensorView& actual, const TensorView& expected,
                                const CompareOptions& options);

}  // namespace txe::numerics

#endif  // TXE_CC_NUMERICS_COMPARE_H_
