// Bit-level helpers for the floating types the comparator reads: bfloat16 and IEEE half are
// carried as raw uint16 storage and widened exactly; ordered integers give ULP distances.
#ifndef TXE_CC_NUMERICS_FLOAT_BITS_H_
#define TXE_CC_NUMERICS_FLOAT_BITS_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace txe::numerics {

struct BFloat16 { uint16_t bits; };
struct Float16 { uint16_t bits; };

inline float BitsToFloat(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t FloatToBits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }
inline uint64_t DoubleToBits(double d) { uint64_t b; std::memcpy(&b, &d, 8); return b; }

inline float BFloat16ToFloat(BFloat16 v) { return BitsToFloat(uint32_t{v.bits} << 16); }

// Exact widening of IEEE binary16 (normals, subnormals, inf, NaN with payload).
inline float Float16ToFloat(Float16 v) {
  const uint32_t sign = uint32_t{v.bits & 0x8000u} << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t man = v.bits & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return BitsToFloat(sign);
    // Subnormal: normalise the mantissa.
    int e = -1;
    do { man <<= 1; ++e; } while ((man & 0x400u) == 0);
    man &= 0x3ffu;
    return BitsToFloat(sign | (uint32_t(127 - 15 - e) << 23) | (man << 13));
  }
  return BitsToFloat(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

inline double ToDouble(double v) { return v; }
inline double ToDouble(float v) { return v; }
inline double ToDouble(BFloat16 v) { return BFloat16ToFloat(v); }
inline double ToDouble(Float16 v) { return Float16ToFloat(v); }

// Sign-magnitude bits of the value in the ULP type U, mapped to a monotonic signed integer
// (so that -0 and +0 coincide and adjacent floats differ by one). The value must be exactly
// representable in U, which holds because U is the promoted type of both inputs.
template <typename U> struct UlpTraits;
// Branch-free conditional negation: signs of real data are random, so a branch mispredicts.
inline int64_t NegateIf(int64_t mag, uint64_t sign_bit) {
  const int64_t s = -static_cast<int64_t>(sign_bit);
  return (mag ^ s) - s;
}

template <> struct UlpTraits<double> {
  template <typename T> static int64_t Ordered(T v) {
    const uint64_t b = DoubleToBits(ToDouble(v));
    return NegateIf(static_cast<int64_t>(b & 0x7fffffffffffffffull), b >> 63);
  }
};
template <> struct UlpTraits<float> {
  template <typename T> static int64_t Ordered(T v) {
    float f;
    if constexpr (std::is_same_v<T, float>) {
      f = v;
    } else {
      f = static_cast<float>(ToDouble(v));
    }
    const uint32_t b = FloatToBits(f);
    return NegateIf(b & 0x7fffffffu, b >> 31);
  }
};
inline int64_t OrderedHalfBits(uint16_t b) { return NegateIf(b & 0x7fffu, b >> 15); }
template <> struct UlpTraits<BFloat16> {
  static int64_t Ordered(BFloat16 v) { return OrderedHalfBits(v.bits); }
};
template <> struct UlpTraits<Float16> {
  static int64_t Ordered(Float16 v) { return OrderedHalfBits(v.bits); }
};

// |a - b| of two ordered integers, without signed overflow and without a branch.
inline uint64_t OrderedDistance(int64_t a, int64_t b) {
  const uint64_t d = static_cast<uint64_t>(a) - static_cast<uint64_t>(b);
  const uint64_t m = -static_cast<uint64_t>(a < b);
  return (d ^ m) - m;
}

}  // namespace txe::numerics

#endif  // TXE_CC_NUMERICS_FLOAT_BITS_H_
