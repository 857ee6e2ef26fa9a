// Test support: a small serialized xla::HloModuleProto built through XLA's generated message API
// (the schema in third_party/xla), for tests here and in a fork. Real modules come from JAX:
// `lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()` (see testdata/ for golden ones).
#ifndef TXE_CC_JAX_CALL_HLO_PROTO_TESTING_H_
#define TXE_CC_JAX_CALL_HLO_PROTO_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/jax_call/hlo_signature.h"
#include "xla/service/hlo.pb.h"

namespace txe::jax_call::testing {

inline ::xla::ShapeProto Shape(PrimitiveType t, const std::vector<int64_t>& dims) {
  ::xla::ShapeProto s;
  s.set_element_type(t);
  for (int64_t d : dims) s.add_dimensions(d);
  for (size_t i = 0; i < dims.size(); ++i) s.mutable_layout()->add_minor_to_major(static_cast<int64_t>(dims.size() - 1 - i));
  return s;
}

inline ::xla::ShapeProto TupleShape(const std::vector<::xla::ShapeProto>& elements) {
  ::xla::ShapeProto s;
  s.set_element_type(::xla::TUPLE);
  for (const auto& e : elements) *s.add_tuple_shapes() = e;
  return s;
}

// A module whose host_program_shape is (params) -> result, serialized.
inline std::string HloModuleProto(const std::string& name, const std::vector<::xla::ShapeProto>& params,
                                  const ::xla::ShapeProto& result) {
  ::xla::HloModuleProto m;
  m.set_name(name);
  m.set_entry_computation_name("main");
  for (const auto& p : params) *m.mutable_host_program_shape()->add_parameters() = p;
  *m.mutable_host_program_shape()->mutable_result() = result;
  return m.SerializeAsString();
}

}  // namespace txe::jax_call::testing

#endif  // TXE_CC_JAX_CALL_HLO_PROTO_TESTING_H_
