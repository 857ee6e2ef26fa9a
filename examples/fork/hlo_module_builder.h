// Builds the wire bytes of a small serialized xla::HloModuleProto (only the fields an entry
// signature needs), so the fork example needs neither protobuf nor JAX to produce one. In a fork
// the bytes come from JAX: `lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()`.
#ifndef TXE_EXAMPLES_FORK_HLO_MODULE_BUILDER_H_
#define TXE_EXAMPLES_FORK_HLO_MODULE_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/jax_call/hlo_signature.h"

namespace xla_fork::testing {

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

// xla.ShapeProto: element_type = 2, dimensions = 3 (packed), tuple_shapes = 4, layout = 5.
inline std::string ShapeProto(txe::jax_call::PrimitiveType t, const std::vector<int64_t>& dims) {
  std::string s = VarintField(2, static_cast<uint64_t>(t));
  std::string packed;
  for (int64_t d : dims) packed += Varint(static_cast<uint64_t>(d));
  if (!dims.empty()) s += BytesField(3, packed);
  return s + BytesField(5, BytesField(1, std::string()));  // a layout, as XLA writes one
}
inline std::string TupleShapeProto(const std::vector<std::string>& elements) {
  std::string s = VarintField(2, static_cast<uint64_t>(txe::jax_call::PrimitiveType::kTuple));
  for (const std::string& e : elements) s += BytesField(4, e);
  return s;
}

// xla.HloModuleProto: name = 1, entry_computation_name = 2, host_program_shape = 4
// (xla.ProgramShapeProto: parameters = 1, result = 2, parameter_names = 3).
inline std::string HloModuleProto(const std::string& name, const std::vector<std::string>& params,
                                  const std::string& result) {
  std::string program_shape;
  for (const std::string& p : params) program_shape += BytesField(1, p);
  program_shape += BytesField(2, result);
  return BytesField(1, name) + BytesField(2, "main") + BytesField(4, program_shape);
}

}  // namespace xla_fork::testing

#endif  // TXE_EXAMPLES_FORK_HLO_MODULE_BUILDER_H_
