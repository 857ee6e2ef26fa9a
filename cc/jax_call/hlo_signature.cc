#include "cc/jax_call/hlo_signature.h"

#include <cctype>
#include <limits>
#include <utility>

namespace txe::jax_call {
namespace {

constexpr int kMaxTupleDepth = 64;

StatusOr<ArrayType> FromShape(const ::xla::ShapeProto& shape, int depth) {
  if (depth > kMaxTupleDepth) {
    return InvalidArgumentError("HloModuleProto: tuple nesting deeper than " + std::to_string(kMaxTupleDepth));
  }
  ArrayType t;
  t.type = shape.element_type();
  t.dims.assign(shape.dimensions().begin(), shape.dimensions().end());
  for (bool d : shape.is_dynamic_dimension()) t.dynamic_dims.push_back(d);
  for (const ::xla::ShapeProto& element : shape.tuple_shapes()) {
    TXE_ASSIGN_OR_RETURN(ArrayType e, FromShape(element, depth + 1));
    t.tuple.push_back(std::move(e));
  }
  if (!t.is_dynamic()) t.dynamic_dims.clear();
  return t;
}

bool HasSignature(const ::xla::ProgramShapeProto& ps) {
  return ps.has_result() || ps.parameters_size() > 0;
}

}  // namespace

std::string PrimitiveTypeName(PrimitiveType type) {
  if (!::xla::PrimitiveType_IsValid(type)) return "type<" + std::to_string(static_cast<int>(type)) + ">";
  if (type == ::xla::OPAQUE_TYPE) return "opaque";  // "OPAQUE" is a macro in windows.h, not a name
  if (type == ::xla::PRIMITIVE_TYPE_INVALID) return "invalid";
  std::string name = ::xla::PrimitiveType_Name(type);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string PrimitiveTypeNumpyName(PrimitiveType type) {
  const std::string hlo = PrimitiveTypeName(type);
  if (hlo == "pred") return "bool";
  if (hlo == "bf16") return "bfloat16";
  if (hlo.size() < 2) return "";
  const std::string rest = hlo.substr(1);
  const bool digits = rest.find_first_not_of("0123456789") == std::string::npos;
  switch (hlo[0]) {
    case 's': return digits ? "int" + rest : "";
    case 'u': return digits ? "uint" + rest : "";
    case 'c': return digits ? "complex" + rest : "";
    case 'f': {
      if (digits) return "float" + rest;                       // f16, f32, f64
      const size_t e = rest.find('e');                          // f8e4m3fn -> float8_e4m3fn
      if (e == std::string::npos || e == 0) return "";
      return "float" + rest.substr(0, e) + "_" + rest.substr(e);
    }
    default: return "";
  }
}

StatusOr<PrimitiveType> PrimitiveTypeFromName(std::string_view name) {
  const ::google::protobuf::EnumDescriptor* d = ::xla::PrimitiveType_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const auto type = static_cast<PrimitiveType>(d->value(i)->number());
    if (type == ::xla::PRIMITIVE_TYPE_INVALID) continue;
    const std::string numpy = PrimitiveTypeNumpyName(type);
    if (name == PrimitiveTypeName(type) || (!numpy.empty() && name == numpy)) return type;
  }
  return InvalidArgumentError("unknown element type '" + std::string(name) + "'");
}

bool ArrayType::is_dynamic() const {
  for (bool d : dynamic_dims) {
    if (d) return true;
  }
  return false;
}

std::string ArrayType::ToString() const {
  if (type == ::xla::TUPLE) {
    std::string out = "(";
    for (size_t i = 0; i < tuple.size(); ++i) out += (i ? ", " : "") + tuple[i].ToString();
    return out + ")";
  }
  std::string out = PrimitiveTypeName(type) + "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ",";
    if (i < dynamic_dims.size() && dynamic_dims[i]) out += "<=";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

std::vector<ArrayType> HloSignature::flat_results() const {
  if (result.type == ::xla::TUPLE) return result.tuple;
  return {result};
}

StatusOr<HloSignature> ReadHloSignature(const ::xla::HloModuleProto& module) {
  HloSignature sig;
  sig.module_name = module.name();
  const ::xla::ProgramShapeProto* ps = nullptr;
  if (module.has_host_program_shape() && HasSignature(module.host_program_shape())) {
    ps = &module.host_program_shape();
  } else {
    for (const ::xla::HloComputationProto& c : module.computations()) {
      if (c.id() == module.entry_computation_id() && c.has_program_shape()) {
        ps = &c.program_shape();
        break;
      }
    }
  }
  if (ps == nullptr) {
    return InvalidArgumentError("HloModuleProto '" + sig.module_name +
                                "' has neither host_program_shape nor an entry computation program_shape");
  }
  for (const ::xla::ShapeProto& p : ps->parameters()) {
    TXE_ASSIGN_OR_RETURN(ArrayType t, FromShape(p, 0));
    sig.parameters.push_back(std::move(t));
  }
  sig.parameter_names.assign(ps->parameter_names().begin(), ps->parameter_names().end());
  TXE_ASSIGN_OR_RETURN(sig.result, FromShape(ps->result(), 0));
  if (sig.result.type == ::xla::PRIMITIVE_TYPE_INVALID) {
    return InvalidArgumentError("HloModuleProto '" + sig.module_name + "' has an entry signature without a result");
  }
  return sig;
}

StatusOr<HloSignature> ReadHloSignature(std::string_view serialized) {
  if (serialized.empty()) return InvalidArgumentError("empty HloModuleProto");
  if (serialized.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return InvalidArgumentError("HloModuleProto of " + std::to_string(serialized.size()) + " bytes is over 2 GiB");
  }
  ::xla::HloModuleProto module;
  if (!module.ParseFromArray(serialized.data(), static_cast<int>(serialized.size()))) {
    return InvalidArgumentError("malformed HloModuleProto: " + std::to_string(serialized.size()) +
                                " bytes that protobuf cannot parse as xla.HloModuleProto");
  }
  return ReadHloSignature(module);
}

}  // namespace txe::jax_call
