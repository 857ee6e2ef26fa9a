#include "cc/jax_call/hlo_signature.h"

#include <optional>
#include <utility>

namespace txe::jax_call {
namespace {

struct TypeName {
  PrimitiveType type;
  const char* hlo;
  const char* numpy;
};

constexpr TypeName kTypeNames[] = {
    {PrimitiveType::kPred, "pred", "bool"},
    {PrimitiveType::kS4, "s4", "int4"},
    {PrimitiveType::kS8, "s8", "int8"},
    {PrimitiveType::kS16, "s16", "int16"},
    {PrimitiveType::kS32, "s32", "int32"},
    {PrimitiveType::kS64, "s64", "int64"},
    {PrimitiveType::kU4, "u4", "uint4"},
    {PrimitiveType::kU8, "u8", "uint8"},
    {PrimitiveType::kU16, "u16", "uint16"},
    {PrimitiveType::kU32, "u32", "uint32"},
    {PrimitiveType::kU64, "u64", "uint64"},
    {PrimitiveType::kF16, "f16", "float16"},
    {PrimitiveType::kBF16, "bf16", "bfloat16"},
    {PrimitiveType::kF32, "f32", "float32"},
    {PrimitiveType::kF64, "f64", "float64"},
    {PrimitiveType::kC64, "c64", "complex64"},
    {PrimitiveType::kC128, "c128", "complex128"},
    {PrimitiveType::kF8E5M2, "f8e5m2", "float8_e5m2"},
    {PrimitiveType::kF8E4M3FN, "f8e4m3fn", "float8_e4m3fn"},
    {PrimitiveType::kF8E4M3B11FNUZ, "f8e4m3b11fnuz", "float8_e4m3b11fnuz"},
    {PrimitiveType::kF8E5M2FNUZ, "f8e5m2fnuz", "float8_e5m2fnuz"},
    {PrimitiveType::kF8E4M3FNUZ, "f8e4m3fnuz", "float8_e4m3fnuz"},
    {PrimitiveType::kTuple, "tuple", "tuple"},
    {PrimitiveType::kToken, "token", "token"},
    {PrimitiveType::kOpaque, "opaque", "opaque"},
};

// ---- protobuf wire format: just enough to walk nested messages --------------------------------

enum WireType : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class WireReader {
 public:
  WireReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}

  bool done() const { return pos_ >= data_.size(); }

  // Reads the next tag; returns false at the end.
  StatusOr<bool> Next(int* field, int* wire_type) {
    if (done()) return false;
    TXE_ASSIGN_OR_RETURN(uint64_t tag, Varint());
    *field = static_cast<int>(tag >> 3);
    *wire_type = static_cast<int>(tag & 7);
    if (*field == 0) return Error("field number 0");
    return true;
  }

  StatusOr<uint64_t> Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return Error("truncated varint");
      uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    return Error("varint longer than 10 bytes");
  }

  StatusOr<std::string_view> Bytes() {
    TXE_ASSIGN_OR_RETURN(uint64_t size, Varint());
    if (size > data_.size() - pos_) return Error("length-delimited field runs past the end");
    std::string_view out = data_.substr(pos_, size);
    pos_ += size;
    return out;
  }

  Status Skip(int wire_type) {
    switch (wire_type) {
      case kVarint:
        return Varint().status();
      case kFixed64:
        return Advance(8);
      case kFixed32:
        return Advance(4);
      case kLengthDelimited:
        return Bytes().status();
      default:
        return Error("unsupported wire type " + std::to_string(wire_type));
    }
  }

  Status Error(const std::string& why) const {
    return InvalidArgumentError("malformed HloModuleProto (" + what_ + " at byte " + std::to_string(pos_) +
                                "): " + why);
  }

 private:
  Status Advance(size_t n) {
    if (n > data_.size() - pos_) return Error("fixed-size field runs past the end");
    pos_ += n;
    return OkStatus();
  }

  std::string_view data_;
  std::string what_;
  size_t pos_ = 0;
};

// Appends the varints of a packed (or single unpacked) repeated scalar field.
template <typename T>
Status ReadRepeatedScalar(WireReader& reader, int wire_type, const std::string& what, std::vector<T>* out) {
  if (wire_type == kVarint) {
    TXE_ASSIGN_OR_RETURN(uint64_t v, reader.Varint());
    out->push_back(static_cast<T>(v));
    return OkStatus();
  }
  if (wire_type != kLengthDelimited) return reader.Error(what + " has wire type " + std::to_string(wire_type));
  TXE_ASSIGN_OR_RETURN(std::string_view packed, reader.Bytes());
  WireReader inner(packed, what);
  while (!inner.done()) {
    TXE_ASSIGN_OR_RETURN(uint64_t v, inner.Varint());
    out->push_back(static_cast<T>(v));
  }
  return OkStatus();
}

// xla.ShapeProto: element_type = 2, dimensions = 3, tuple_shapes = 4, is_dynamic_dimension = 6.
StatusOr<ArrayType> ParseShape(std::string_view data, int depth) {
  if (depth > 64) return InvalidArgumentError("malformed HloModuleProto: tuple nesting deeper than 64");
  WireReader reader(data, "ShapeProto");
  ArrayType shape;
  int field = 0, wire_type = 0;
  while (true) {
    TXE_ASSIGN_OR_RETURN(bool more, reader.Next(&field, &wire_type));
    if (!more) break;
    if (field == 2 && wire_type == kVarint) {
      TXE_ASSIGN_OR_RETURN(uint64_t t, reader.Varint());
      shape.type = static_cast<PrimitiveType>(static_cast<int32_t>(t));
    } else if (field == 3) {
      TXE_RETURN_IF_ERROR(ReadRepeatedScalar(reader, wire_type, "ShapeProto.dimensions", &shape.dims));
    } else if (field == 4 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view sub, reader.Bytes());
      TXE_ASSIGN_OR_RETURN(ArrayType element, ParseShape(sub, depth + 1));
      shape.tuple.push_back(std::move(element));
    } else if (field == 6) {
      std::vector<uint64_t> flags;
      TXE_RETURN_IF_ERROR(ReadRepeatedScalar(reader, wire_type, "ShapeProto.is_dynamic_dimension", &flags));
      for (uint64_t f : flags) shape.dynamic_dims.push_back(f != 0);
    } else {
      TXE_RETURN_IF_ERROR(reader.Skip(wire_type));
    }
  }
  if (!shape.is_dynamic()) shape.dynamic_dims.clear();
  return shape;
}

// xla.ProgramShapeProto: parameters = 1, result = 2, parameter_names = 3.
Status ParseProgramShape(std::string_view data, HloSignature* sig) {
  WireReader reader(data, "ProgramShapeProto");
  int field = 0, wire_type = 0;
  while (true) {
    TXE_ASSIGN_OR_RETURN(bool more, reader.Next(&field, &wire_type));
    if (!more) break;
    if (field == 1 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view sub, reader.Bytes());
      TXE_ASSIGN_OR_RETURN(ArrayType p, ParseShape(sub, 0));
      sig->parameters.push_back(std::move(p));
    } else if (field == 2 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view sub, reader.Bytes());
      TXE_ASSIGN_OR_RETURN(sig->result, ParseShape(sub, 0));
    } else if (field == 3 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view name, reader.Bytes());
      sig->parameter_names.emplace_back(name);
    } else {
      TXE_RETURN_IF_ERROR(reader.Skip(wire_type));
    }
  }
  return OkStatus();
}

// xla.HloComputationProto: id = 5, program_shape = 4. Returns the program shape bytes when `id`
// matches (nullopt otherwise).
StatusOr<std::optional<std::string_view>> ComputationProgramShape(std::string_view data, int64_t entry_id) {
  WireReader reader(data, "HloComputationProto");
  std::optional<std::string_view> program_shape;
  std::optional<int64_t> id;
  int field = 0, wire_type = 0;
  while (true) {
    TXE_ASSIGN_OR_RETURN(bool more, reader.Next(&field, &wire_type));
    if (!more) break;
    if (field == 4 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view sub, reader.Bytes());
      program_shape = sub;
    } else if (field == 5 && wire_type == kVarint) {
      TXE_ASSIGN_OR_RETURN(uint64_t v, reader.Varint());
      id = static_cast<int64_t>(v);
    } else {
      TXE_RETURN_IF_ERROR(reader.Skip(wire_type));
    }
  }
  if (id.has_value() && *id == entry_id) return program_shape;
  return std::optional<std::string_view>();
}

}  // namespace

std::string PrimitiveTypeName(PrimitiveType type) {
  for (const TypeName& t : kTypeNames) {
    if (t.type == type) return t.hlo;
  }
  return "type<" + std::to_string(static_cast<int32_t>(type)) + ">";
}

StatusOr<PrimitiveType> PrimitiveTypeFromName(std::string_view name) {
  for (const TypeName& t : kTypeNames) {
    if (name == t.hlo || name == t.numpy) return t.type;
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
  if (type == PrimitiveType::kTuple) {
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
  if (result.type == PrimitiveType::kTuple) return result.tuple;
  return {result};
}

// xla.HloModuleProto: name = 1, entry_computation_name = 2, computations = 3,
// host_program_shape = 4, entry_computation_id = 6.
StatusOr<HloSignature> ReadHloSignature(std::string_view serialized) {
  if (serialized.empty()) return InvalidArgumentError("empty HloModuleProto");
  WireReader reader(serialized, "HloModuleProto");
  HloSignature sig;
  std::optional<std::string_view> host_program_shape;
  std::vector<std::string_view> computations;
  int64_t entry_id = -1;
  int field = 0, wire_type = 0;
  while (true) {
    TXE_ASSIGN_OR_RETURN(bool more, reader.Next(&field, &wire_type));
    if (!more) break;
    if (field == 1 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view name, reader.Bytes());
      sig.module_name = std::string(name);
    } else if (field == 3 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view sub, reader.Bytes());
      computations.push_back(sub);
    } else if (field == 4 && wire_type == kLengthDelimited) {
      TXE_ASSIGN_OR_RETURN(std::string_view sub, reader.Bytes());
      host_program_shape = sub;
    } else if (field == 6 && wire_type == kVarint) {
      TXE_ASSIGN_OR_RETURN(uint64_t v, reader.Varint());
      entry_id = static_cast<int64_t>(v);
    } else {
      TXE_RETURN_IF_ERROR(reader.Skip(wire_type));
    }
  }
  if (!host_program_shape.has_value() || host_program_shape->empty()) {
    for (std::string_view c : computations) {
      TXE_ASSIGN_OR_RETURN(std::optional<std::string_view> ps, ComputationProgramShape(c, entry_id));
      if (ps.has_value()) {
        host_program_shape = ps;
        break;
      }
    }
  }
  if (!host_program_shape.has_value()) {
    return InvalidArgumentError("HloModuleProto '" + sig.module_name +
                                "' has neither host_program_shape nor an entry computation program_shape");
  }
  TXE_RETURN_IF_ERROR(ParseProgramShape(*host_program_shape, &sig));
  if (sig.result.type == PrimitiveType::kInvalid) {
    return InvalidArgumentError("HloModuleProto '" + sig.module_name + "' has an entry signature without a result");
  }
  return sig;
}

}  // namespace txe::jax_call
