// Test support: the wire bytes of a small serialized xla::HloModuleProto, spelled out field by
// field (only what an entry signature needs), so tests need neither protobuf nor JAX to make one.
// In real use the bytes come from JAX: `lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()`.
#ifndef TXE_CC_JAX_CALL_HLO_PROTO_TESTING_H_
#define TXE_CC_JAX_CALL_HLO_PROTO_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/jax_call/hlo_signature.h"

namespace txe::jax_call::testing {

inline std::string Varint(uint64_t v) {
  std::string out;
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    if (v) byte |= 0x80;
    out.push_back(static_cast<char>(byte));
  } while (v);
  return out;
}
inline std::string VarintField(int field, uint64_t v) { return Varint(uint64_t(field) << 3 | 0) + Varint(v); }
inline std::string BytesField(int field, const std::string& b) {
  return Varint(uint64_t(field) << 3 | 2) + Varint(b.size()) + b;
}

// xla.ShapeProto: element_type = 2, dimensions = 3 (packed, or one field per dimension),
// tuple_shapes = 4, layout = 5 (written as XLA does; the reader skips it).
inline std::string Shape(PrimitiveType t, const std::vector<int64_t>& dims, bool packed = true) {
  std::string s = VarintField(2, static_cast<uint64_t>(t));
  if (packed) {
    std::string p;
    for (int64_t d : dims) p += Varint(static_cast<uint64_t>(d));
    if (!dims.empty()) s += BytesField(3, p);
  } else {
    for (int64_t d : dims) s += VarintField(3, static_cast<uint64_t>(d));
  }
  return s + BytesField(5, VarintField(1, 0));
}
inline std::string TupleShape(const std::vector<std::string>& elements) {
  std::string s = VarintField(2, static_cast<uint64_t>(PrimitiveType::kTuple));
  for (const std::string& e : elements) s += BytesField(4, e);
  return s;
}

// xla.ProgramShapeProto: parameters = 1, result = 2.
inline std::string ProgramShape(const std::vector<std::string>& params, const std::string& result) {
  std::string s;
  for (const std::string& p : params) s += BytesField(1, p);
  return s + BytesField(2, result);
}

// xla.HloModuleProto: name = 1, entry_computation_name = 2, host_program_shape = 4.
inline std::string HloModuleProto(const std::string& name, const std::vector<std::string>& params,
                                  const std::string& result) {
  return BytesField(1, name) + BytesField(2, "main") + BytesField(4, ProgramShape(params, result));
}

}  // namespace txe::jax_call::testing

#endif  // TXE_CC_JAX_CALL_HLO_PROTO_TESTING_H_
