#include "cc/numerics/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <thread>

#include "cc/numerics/float_bits.h"

namespace txe::numerics {
namespace {

// Inputs below this many elements per thread are not worth a thread.
constexpr int64_t kMinElementsPerThread = int64_t{1} << 16;

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

// NaN outranks every number; among equals the earlier index is kept by using strict `>`.
inline bool Outranks(double x, double current) {
  if (std::isnan(current)) return false;
  return std::isnan(x) || x > current;
}

struct Partial {
  int64_t mismatched = 0;
  double max_abs = -1.0, max_rel = -1.0, max_abs_all = -1.0, max_rel_all = -1.0;
  int64_t max_abs_i = -1, max_rel_i = -1, max_abs_all_i = -1, max_rel_all_i = -1;
  uint64_t max_ulp = 0;
  int64_t max_ulp_i = -1;
  int64_t ulp_undefined = 0;
  std::array<int64_t, kUlpBuckets> hist{};

  // Folds a later range into this one; earlier indices win ties.
  void Merge(const Partial& o) {
    mismatched += o.mismatched;
    auto take = [](double& v, int64_t& i, double ov, int64_t oi) {
      if (oi >= 0 && (i < 0 || Outranks(ov, v))) { v = ov; i = oi; }
    };
    take(max_abs, max_abs_i, o.max_abs, o.max_abs_i);
    take(max_rel, max_rel_i, o.max_rel, o.max_rel_i);
    take(max_abs_all, max_abs_all_i, o.max_abs_all, o.max_abs_all_i);
    take(max_rel_all, max_rel_all_i, o.max_rel_all, o.max_rel_all_i);
    if (o.max_ulp_i >= 0 && (max_ulp_i < 0 || o.max_ulp > max_ulp)) {
      max_ulp = o.max_ulp;
      max_ulp_i = o.max_ulp_i;
    }
    ulp_undefined += o.ulp_undefined;
    for (int b = 0; b < kUlpBuckets; ++b) hist[b] += o.hist[b];
  }
};

template <typename A, typename E, typename U>
struct Kernel {
  double rtol, atol;
  bool equal_nan;

  template <typename T>
  static int64_t Ordered(T v) {
    if constexpr (std::is_same_v<U, BFloat16> || std::is_same_v<U, Float16>) {
      static_assert(std::is_same_v<T, U>, "16-bit ULP type only when both inputs have it");
    }
    return UlpTraits<U>::Ordered(v);
  }

  // Requires p's "all" maxima and max_ulp to be seeded at the range's first index (Seed).
  __attribute__((always_inline)) inline void Visit(A av, E ev, int64_t index, Partial& p) const {
    const double a = ToDouble(av);
    const double e = ToDouble(ev);
    if (a == e) {  // 0 difference, 0 ulp (also +0 vs -0), always close
      ++p.hist[0];
      return;
    }
    const double abs_diff = std::fabs(a - e);
    if (__builtin_expect(!(abs_diff <= std::numeric_limits<double>::max()), 0)) {
      VisitNonFinite(av, ev, a, e, abs_diff, index, p);
      return;
    }
    // Both finite and different. A running maximum rarely changes, so test the relative
    // difference by multiplication and divide only for a new maximum; a NaN maximum (which
    // nothing outranks) makes the comparison false as it should.
    const double mag_e = std::fabs(e);
    if (abs_diff > p.max_abs_all) { p.max_abs_all = abs_diff; p.max_abs_all_i = index; }
    if (abs_diff > p.max_rel_all * mag_e) {
      const double rel = abs_diff / mag_e;
      if (rel > p.max_rel_all) { p.max_rel_all = rel; p.max_rel_all_i = index; }
    }
    if (!(abs_diff <= atol + rtol * mag_e)) Mismatch(abs_diff, abs_diff / mag_e, index, p);
    const uint64_t d = OrderedDistance(Ordered(av), Ordered(ev));
    ++p.hist[UlpBucket(d)];
    if (d > p.max_ulp) { p.max_ulp = d; p.max_ulp_i = index; }
  }

  __attribute__((noinline)) static void Mismatch(double abs_diff, double rel_diff, int64_t index, Partial& p) {
    ++p.mismatched;
    if (p.max_abs_i < 0 || Outranks(abs_diff, p.max_abs)) { p.max_abs = abs_diff; p.max_abs_i = index; }
    if (p.max_rel_i < 0 || Outranks(rel_diff, p.max_rel)) { p.max_rel = rel_diff; p.max_rel_i = index; }
  }

  // A NaN or infinite difference: torch.isclose's NaN (equal_nan) and infinity rules.
  __attribute__((noinline)) void VisitNonFinite(A av, E ev, double a, double e, double abs_diff, int64_t index,
                      Partial& p) const {
    const bool a_nan = std::isnan(a), e_nan = std::isnan(e);
    if (equal_nan && a_nan && e_nan) {
      ++p.hist[0];
      return;
    }
    const double rel_diff = abs_diff / std::fabs(e);
    if (Outranks(abs_diff, p.max_abs_all)) { p.max_abs_all = abs_diff; p.max_abs_all_i = index; }
    if (Outranks(rel_diff, p.max_rel_all)) { p.max_rel_all = rel_diff; p.max_rel_all_i = index; }
    Mismatch(abs_diff, rel_diff, index, p);  // never close: the difference is not finite
    if (a_nan || e_nan) {
      ++p.ulp_undefined;
      return;
    }
    const uint64_t d = OrderedDistance(Ordered(av), Ordered(ev));
    ++p.hist[UlpBucket(d)];
    if (d > p.max_ulp) { p.max_ulp = d; p.max_ulp_i = index; }
  }

  // Every difference is >= 0 (or NaN, which outranks), so seeding the maxima with 0 at the
  // first index gives torch.max's first-occurrence answer without a per-element "unset" test.
  static void Seed(int64_t begin, Partial& p) {
    p.max_abs_all = p.max_rel_all = 0.0;
    p.max_abs_all_i = p.max_rel_all_i = p.max_ulp_i = begin;
    p.max_ulp = 0;
  }

  void RunContiguous(const A* a, const E* e, int64_t begin, int64_t end, Partial& p) const {
    for (int64_t i = begin; i < end; ++i) Visit(a[i], e[i], i, p);
  }

  // Walks logical row-major indices [begin, end) with an odometer over the shape.
  void RunStrided(const A* a, const E* e, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& sa, const std::vector<int64_t>& se, int64_t begin,
                  int64_t end, Partial& p) const {
    const int rank = static_cast<int>(shape.size());
    std::vector<int64_t> idx(rank, 0);  // O(rank), not O(elements)
    int64_t off_a = 0, off_e = 0, rem = begin;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
      off_a += idx[d] * sa[d];
      off_e += idx[d] * se[d];
    }
    for (int64_t i = begin; i < end; ++i) {
      Visit(a[off_a], e[off_e], i, p);
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d]) { off_a += sa[d]; off_e += se[d]; break; }
        off_a -= (shape[d] - 1) * sa[d];
        off_e -= (shape[d] - 1) * se[d];
        idx[d] = 0;
      }
    }
  }
};

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

bool IsContiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  const std::vector<int64_t> c = ContiguousStrides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && strides[d] != c[d]) return false;
  }
  return true;
}

template <typename A, typename E, typename U>
Partial RunAll(const TensorView& av, const TensorView& ev, const std::vector<int64_t>& sa,
               const std::vector<int64_t>& se, const CompareOptions& o, int64_t total,
               int threads) {
  const Kernel<A, E, U> k{o.rtol, o.atol, o.equal_nan};
  const A* a = static_cast<const A*>(av.data);
  const E* e = static_cast<const E*>(ev.data);
  const bool contiguous = IsContiguous(av.shape, sa) && IsContiguous(ev.shape, se);
  std::vector<Partial> parts(threads);
  auto work = [&](int t) {
    const int64_t begin = total * t / threads, end = total * (t + 1) / threads;
    k.Seed(begin, parts[t]);
    if (contiguous) {
      k.RunContiguous(a, e, begin, end, parts[t]);
    } else {
      k.RunStrided(a, e, av.shape, sa, se, begin, end, parts[t]);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  for (int t = 1; t < threads; ++t) parts[0].Merge(parts[t]);
  return parts[0];
}

template <typename A, typename E>
Partial DispatchUlp(DType ulp, const TensorView& av, const TensorView& ev,
                    const std::vector<int64_t>& sa, const std::vector<int64_t>& se,
                    const CompareOptions& o, int64_t total, int threads) {
  switch (ulp) {
    case DType::kFloat64: return RunAll<A, E, double>(av, ev, sa, se, o, total, threads);
    case DType::kFloat32: return RunAll<A, E, float>(av, ev, sa, se, o, total, threads);
    case DType::kBFloat16:
      if constexpr (std::is_same_v<A, BFloat16> && std::is_same_v<E, BFloat16>) {
        return RunAll<A, E, BFloat16>(av, ev, sa, se, o, total, threads);
      }
      break;
    case DType::kFloat16:
      if constexpr (std::is_same_v<A, Float16> && std::is_same_v<E, Float16>) {
        return RunAll<A, E, Float16>(av, ev, sa, se, o, total, threads);
      }
      break;
  }
  return RunAll<A, E, double>(av, ev, sa, se, o, total, threads);  // unreachable by PromoteTypes
}

template <typename A>
Partial DispatchExpected(DType ulp, const TensorView& av, const TensorView& ev,
                         const std::vector<int64_t>& sa, const std::vector<int64_t>& se,
                         const CompareOptions& o, int64_t total, int threads) {
  switch (ev.dtype) {
    case DType::kFloat64: return DispatchUlp<A, double>(ulp, av, ev, sa, se, o, total, threads);
    case DType::kFloat32: return DispatchUlp<A, float>(ulp, av, ev, sa, se, o, total, threads);
    case DType::kBFloat16: return DispatchUlp<A, BFloat16>(ulp, av, ev, sa, se, o, total, threads);
    case DType::kFloat16: return DispatchUlp<A, Float16>(ulp, av, ev, sa, se, o, total, threads);
  }
  return {};
}

Status ValidateView(const char* side, const TensorView& v, int64_t* total) {
  if (static_cast<int>(v.dtype) < 0 || static_cast<int>(v.dtype) > 3) {
    return InvalidArgumentError(std::string(side) + ": unknown dtype code " +
                                std::to_string(static_cast<int>(v.dtype)));
  }
  if (!v.strides.empty() && v.strides.size() != v.shape.size()) {
    return InvalidArgumentError(std::string(side) + ": strides have " +
                                std::to_string(v.strides.size()) + " entries for a shape of rank " +
                                std::to_string(v.shape.size()));
  }
  int64_t n = 1;
  bool overflow = false, empty = false;
  for (int64_t d : v.shape) {
    if (d < 0) return InvalidArgumentError(std::string(side) + ": negative dimension in shape " + ShapeString(v.shape));
    overflow |= __builtin_mul_overflow(n, d, &n);
    empty |= d == 0;
  }
  if (empty) {
    n = 0;  // an empty dimension makes any product of the others moot
  } else if (overflow) {
    return InvalidArgumentError(std::string(side) + ": shape " + ShapeString(v.shape) +
                                " has more elements than int64 can count");
  }
  // The walk adds (dim - 1) * stride per dimension to an element offset, then scales it by the
  // element size: every offset must fit in int64 bytes.
  if (n > 0 && !v.strides.empty()) {
    int64_t span = 0;
    for (size_t d = 0; d < v.shape.size(); ++d) {
      const int64_t stride = v.strides[d];
      int64_t reach = 0;
      if (stride == INT64_MIN || __builtin_mul_overflow(v.shape[d] - 1, stride < 0 ? -stride : stride, &reach) ||
          __builtin_add_overflow(span, reach, &span)) {
        overflow = true;
        break;
      }
    }
    int64_t bytes = 0;
    if (overflow || __builtin_mul_overflow(span, int64_t{DTypeSize(v.dtype)}, &bytes)) {
      return InvalidArgumentError(std::string(side) + ": strides " + ShapeString(v.strides) + " over shape " +
                                  ShapeString(v.shape) + " reach past what int64 byte offsets address");
    }
  }
  if (n > 0 && v.data == nullptr) {
    return InvalidArgumentError(std::string(side) + ": null data for " + std::to_string(n) + " elements");
  }
  *total = n;
  return OkStatus();
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return "float64";
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
  }
  return "unknown";
}

int DTypeSize(DType dtype) { return dtype == DType::kFloat64 ? 8 : dtype == DType::kFloat32 ? 4 : 2; }

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kFloat64 || b == DType::kFloat64) return DType::kFloat64;
  return DType::kFloat32;  // float32 with a 16-bit type, or bfloat16 with float16
}

int UlpBucket(uint64_t distance) {
  if (distance == 0) return 0;
  int bits = 64 - __builtin_clzll(distance);  // 1 -> 1, 2..3 -> 2, 4..7 -> 3, ...
  return std::min(bits, kUlpBuckets - 1);
}

std::string UlpBucketLabel(int bucket) {
  if (bucket <= 0) return "0";
  if (bucket == 1) return "1";
  if (bucket >= kUlpBuckets - 1) return ">=" + std::to_string(int64_t{1} << (kUlpBuckets - 2));
  return std::to_string(int64_t{1} << (bucket - 1)) + "-" + std::to_string((int64_t{1} << bucket) - 1);
}

StatusOr<CompareResult> Compare(const TensorView& actual, const TensorView& expected,
                                const CompareOptions& options) {
  int64_t total_a = 0, total_e = 0;
  TXE_RETURN_IF_ERROR(ValidateView("actual", actual, &total_a));
  TXE_RETURN_IF_ERROR(ValidateView("expected", expected, &total_e));
  if (actual.shape != expected.shape) {
    return InvalidArgumentError("shape mismatch: actual " + ShapeString(actual.shape) +
                                " vs expected " + ShapeString(expected.shape));
  }
  if (!(options.rtol >= 0.0) || !(options.atol >= 0.0) || std::isinf(options.rtol) ||
      std::isinf(options.atol)) {
    return InvalidArgumentError("rtol and atol must be finite and >= 0, got rtol=" +
                                std::to_string(options.rtol) + " atol=" + std::to_string(options.atol));
  }
  if (options.num_threads < 0) {
    return InvalidArgumentError("num_threads must be >= 0, got " + std::to_string(options.num_threads));
  }
  const int64_t total = total_a;
  CompareResult r;
  r.total = total;
  r.ulp_dtype = PromoteTypes(actual.dtype, expected.dtype);
  if (total == 0) return r;

  int threads = options.num_threads;
  if (threads == 0) {
    const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
    threads = static_cast<int>(std::clamp<int64_t>(total / kMinElementsPerThread, 1, hw));
  }
  threads = static_cast<int>(std::min<int64_t>(threads, total));
  r.num_threads = threads;

  const auto sa = actual.strides.empty() ? ContiguousStrides(actual.shape) : actual.strides;
  const auto se = expected.strides.empty() ? ContiguousStrides(expected.shape) : expected.strides;
  Partial p;
  switch (actual.dtype) {
    case DType::kFloat64: p = DispatchExpected<double>(r.ulp_dtype, actual, expected, sa, se, options, total, threads); break;
    case DType::kFloat32: p = DispatchExpected<float>(r.ulp_dtype, actual, expected, sa, se, options, total, threads); break;
    case DType::kBFloat16: p = DispatchExpected<BFloat16>(r.ulp_dtype, actual, expected, sa, se, options, total, threads); break;
    case DType::kFloat16: p = DispatchExpected<Float16>(r.ulp_dtype, actual, expected, sa, se, options, total, threads); break;
  }
  r.mismatched = p.mismatched;
  if (p.max_abs_i >= 0) {
    r.max_abs_diff = p.max_abs;
    r.max_abs_index = p.max_abs_i;
    r.max_rel_diff = p.max_rel;
    r.max_rel_index = p.max_rel_i;
  }
  r.max_abs_diff_all = p.max_abs_all;
  r.max_abs_index_all = p.max_abs_all_i;
  r.max_rel_diff_all = p.max_rel_all;
  r.max_rel_index_all = p.max_rel_all_i;
  r.max_ulp = p.max_ulp;
  r.max_ulp_index = p.max_ulp_i;
  r.ulp_undefined = p.ulp_undefined;
  r.ulp_histogram = p.hist;
  return r;
}

}  // namespace txe::numerics
