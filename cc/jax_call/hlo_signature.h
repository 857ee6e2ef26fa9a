// The entry signature of an xla::HloModuleProto, read with XLA's own schema
// (third_party/xla/xla/service/hlo.proto, compiled by protoc; a fork passes its own message).
//
// A torch_xla fork hands `_XLAC._xla_user_computation` an HloModuleProto that JAX produced; the
// caller must pass exactly one tensor per entry parameter, with the same shape and element type.
// This reads what that check needs: host_program_shape, or the entry computation's program_shape
// when a producer leaves host_program_shape empty.
#ifndef TXE_CC_JAX_CALL_HLO_SIGNATURE_H_
#define TXE_CC_JAX_CALL_HLO_SIGNATURE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cc/common/status.h"
#include "xla/service/hlo.pb.h"
#include "xla/xla_data.pb.h"

namespace txe::jax_call {

// XLA's element types, as xla_data.proto defines them (every type the pinned XLA knows, including
// S2/U2, F8E4M3, F8E3M4, F4E2M1FN and F8E8M0FNU).
using PrimitiveType = ::xla::PrimitiveType;

// HLO's short name, derived from XLA's enum name the way XLA prints it: "f32", "bf16", "pred",
// "f8e4m3fn", "opaque"; "type<N>" for a number this schema does not define.
std::string PrimitiveTypeName(PrimitiveType type);

// numpy/JAX/ml_dtypes name of a type, derived from its HLO name: "float32", "bfloat16", "bool",
// "int2", "float8_e4m3fn", "float4_e2m1fn"; empty for tuple/token/opaque/buffer.
std::string PrimitiveTypeNumpyName(PrimitiveType type);

// Accepts HLO short names ("f32") and numpy/JAX dtype names ("float32", "bfloat16", "bool",
// "float8_e8m0fnu"). InvalidArgument for anything else.
StatusOr<PrimitiveType> PrimitiveTypeFromName(std::string_view name);

// One array (or, for tuple-shaped parameters, tuple) type of the entry signature.
struct ArrayType {
  PrimitiveType type = ::xla::PRIMITIVE_TYPE_INVALID;
  std::vector<int64_t> dims;
  std::vector<bool> dynamic_dims;     // empty when every dimension is static
  std::vector<ArrayType> tuple;       // elements when type == TUPLE

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
  ArrayType result;                          // a TUPLE when the entry returns several values
  // The result flattened one level: the elements of a tuple result, or the single array.
  std::vector<ArrayType> flat_results() const;
};

// The entry signature of a parsed module (a fork's own xla::HloModuleProto). InvalidArgument for
// a module without an entry signature.
StatusOr<HloSignature> ReadHloSignature(const ::xla::HloModuleProto& module);

// The same from the bytes of a serialized HloModuleProto
// (`XlaComputation.as_serialized_hlo_module_proto()`). InvalidArgument on bytes protobuf cannot
// parse as an HloModuleProto.
StatusOr<HloSignature> ReadHloSignature(std::string_view serialized_hlo_module_proto);

}  // namespace txe::jax_call

#endif  // TXE_CC_JAX_CALL_HLO_SIGNATURE_H_
