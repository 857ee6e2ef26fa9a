// The entry signature of a serialized xla::HloModuleProto, read without protobuf or XLA.
//
// A torch_xla fork hands `_XLAC._xla_user_computation` an HloModuleProto that JAX produced; the
// caller must pass exactly one tensor per entry parameter, with the same shape and element type.
// This reader decodes only what that check needs (host_program_shape, or the entry computation's
// program_shape when a producer leaves host_program_shape empty) so cc/ stays free of protobuf.
#ifndef TXE_CC_JAX_CALL_HLO_SIGNATURE_H_
#define TXE_CC_JAX_CALL_HLO_SIGNATURE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cc/common/status.h"

namespace txe::jax_call {

// xla::PrimitiveType's wire numbers (xla/xla_data.proto). Only array and tuple/token kinds that
// a JAX entry computation can carry are named; others decode as kUnknown-with-number.
enum class PrimitiveType : int32_t {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kTuple = 13,
  kOpaque = 14,
  kC64 = 15,
  kBF16 = 16,
  kToken = 17,
  kC128 = 18,
  kF8E5M2 = 19,
  kF8E4M3FN = 20,
  kS4 = 21,
  kU4 = 22,
  kF8E4M3B11FNUZ = 23,
  kF8E5M2FNUZ = 24,
  kF8E4M3FNUZ = 25,
};

// HLO's short name ("f32", "bf16", "pred", "s64"); "type<N>" for a number not listed above.
std::string PrimitiveTypeName(PrimitiveType type);

// Accepts HLO short names ("f32") and numpy/JAX dtype names ("float32", "bfloat16", "bool",
// "float8_e4m3fn"). InvalidArgument for anything else.
StatusOr<PrimitiveType> PrimitiveTypeFromName(std::string_view name);

// One array (or, for tuple-shaped parameters, tuple) type of the entry signature.
struct ArrayType {
  PrimitiveType type = PrimitiveType::kInvalid;
  std::vector<int64_t> dims;
  std::vector<bool> dynamic_dims;     // empty when every dimension is static
  std::vector<ArrayType> tuple;       // elements when type == kTuple

  bool is_dynamic() const;
  // HLO spelling: "f32[3,4]", "pred[]", "(f32[2], s32[])".
  std::string ToString() const;
  friend bool operator==(const ArrayType& a, const ArrayType& b) {
    return a.type == b.type && a.dims == b.dims && a.tuple == b.tuple && a.is_dynamic() == b.is_dynamic();
  }
  friend bool operator!=(const ArrayType& a, const ArrayType& b) { return !(a == b); }
};

struct HloSignature {
  std::string module_name;
  std::vector<ArrayType> parameters;
  std::vector<std::string> parameter_names;  // often empty: producers need not fill it
  ArrayType result;                          // a kTuple when the entry returns several values
  // The result flattened one level: the elements of a tuple result, or the single array.
  std::vector<ArrayType> flat_results() const;
};

// Decodes the entry signature of a serialized HloModuleProto (the bytes of
// `XlaComputation.as_serialized_hlo_module_proto()`). InvalidArgument on malformed wire data or a
// module without an entry signature.
StatusOr<HloSignature> ReadHloSignature(std::string_view serialized_hlo_module_proto);

}  // namespace txe::jax_call

#endif  // TXE_CC_JAX_CALL_HLO_SIGNATURE_H_
