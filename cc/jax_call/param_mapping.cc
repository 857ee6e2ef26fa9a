#include "cc/jax_call/param_mapping.h"

#include <algorithm>
#include <utility>

namespace txe::jax_call {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

StatusOr<ArrayType> ExpectedType(const std::string& what, const std::string& dtype,
                                 const std::vector<int64_t>& shape) {
  StatusOr<PrimitiveType> type = PrimitiveTypeFromName(dtype);
  if (!type.ok()) return InvalidArgumentError(what + ": unsupported dtype '" + dtype + "'");
  ArrayType t;
  t.type = *type;
  t.dims = shape;
  return t;
}

Status CheckParam(const std::string& what, int64_t index, const ArrayType& param, const ArrayType& expected) {
  if (param.type == PrimitiveType::TUPLE) {
    return UnimplementedError(what + ": HLO parameter " + std::to_string(index) + " is a tuple " +
                              param.ToString() + "; tupled arguments are not supported");
  }
  if (param.is_dynamic()) {
    return UnimplementedError(what + ": HLO parameter " + std::to_string(index) + " has dynamic dimensions " +
                              param.ToString());
  }
  if (param != expected) {
    return InvalidArgumentError(what + ": HLO parameter " + std::to_string(index) + " is " + param.ToString() +
                                " but the " + (what.rfind("<constant", 0) == 0 ? "constant" : "leaf") + " is " +
                                expected.ToString());
  }
  return OkStatus();
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

const char* LeafKindName(LeafKind kind) { return kind == LeafKind::kTensor ? "tensor" : "static"; }

StatusOr<ParamMapping> BuildParamMapping(const std::vector<Leaf>& leaves,
                                         const std::vector<ConstantSpec>& constants,
                                         const std::vector<int64_t>& kept_var_idx,
                                         const HloSignature& signature) {
  ParamMapping mapping;
  mapping.module_name = signature.module_name;
  mapping.results = signature.flat_results();

  // JAX's flat arguments: the hoisted constants, then the tensor leaves in flattening order.
  const int64_t num_constants = static_cast<int64_t>(constants.size());
  std::vector<int64_t> tensor_leaf;  // flat tensor ordinal -> leaf index
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Leaf& leaf = leaves[i];
    ParamRow row;
    row.path = leaf.path;
    row.kind = leaf.kind;
    if (leaf.kind == LeafKind::kTensor) {
      TXE_RETURN_IF_ERROR(ExpectedType(leaf.path, leaf.dtype, leaf.shape).status());
      row.shape = leaf.shape;
      row.dtype = leaf.dtype;
      tensor_leaf.push_back(static_cast<int64_t>(i));
    } else {
      row.value = leaf.value;
    }
    mapping.rows.push_back(std::move(row));
  }
  for (int64_t c = 0; c < num_constants; ++c) {
    const std::string what = "<constant " + std::to_string(c) + ">";
    TXE_RETURN_IF_ERROR(ExpectedType(what, constants[c].dtype, constants[c].shape).status());
    mapping.constants.push_back(ConstantRow{c, -1, constants[c].shape, constants[c].dtype});
  }

  const int64_t num_flat = num_constants + static_cast<int64_t>(tensor_leaf.size());
  int64_t previous = -1;
  for (int64_t k : kept_var_idx) {
    if (k < 0 || k >= num_flat) {
      return InvalidArgumentError("kept_var_idx entry " + std::to_string(k) + " is out of range: there are " +
                                  std::to_string(num_constants) + " hoisted constants and " +
                                  std::to_string(tensor_leaf.size()) + " tensor leaves");
    }
    if (k <= previous) return InvalidArgumentError("kept_var_idx must be strictly increasing");
    previous = k;
    const int64_t param = static_cast<int64_t>(mapping.sources.size());
    if (k < num_constants) {
      mapping.constants[k].hlo_param = param;
      mapping.sources.push_back({ParamSource::Kind::kConstant, k});
    } else {
      const int64_t leaf = tensor_leaf[k - num_constants];
      mapping.rows[leaf].kept = true;
      mapping.rows[leaf].hlo_param = param;
      mapping.sources.push_back({ParamSource::Kind::kLeaf, leaf});
    }
  }
  for (const ConstantRow& c : mapping.constants) {
    if (c.hlo_param < 0) {
      return InvalidArgumentError("<constant " + std::to_string(c.index) +
                                  ">: hoisted constants are always parameters but kept_var_idx omits it");
    }
  }

  const int64_t num_params = static_cast<int64_t>(signature.parameters.size());
  if (num_params != mapping.num_hlo_params()) {
    std::string kept;
    for (const ParamSource& s : mapping.sources) {
      if (!kept.empty()) kept += ", ";
      kept += s.kind == ParamSource::Kind::kLeaf ? leaves[s.index].path : "<constant " + std::to_string(s.index) + ">";
    }
    return InvalidArgumentError("HLO module '" + signature.module_name + "' has " + std::to_string(num_params) +
                                " parameters but " + std::to_string(mapping.num_hlo_params()) +
                                " inputs are kept [" + kept + "]");
  }
  for (int64_t p = 0; p < num_params; ++p) {
    const ParamSource& s = mapping.sources[p];
    if (s.kind == ParamSource::Kind::kLeaf) {
      const Leaf& leaf = leaves[s.index];
      TXE_ASSIGN_OR_RETURN(ArrayType expected, ExpectedType(leaf.path, leaf.dtype, leaf.shape));
      TXE_RETURN_IF_ERROR(CheckParam(leaf.path, p, signature.parameters[p], expected));
    } else {
      const std::string what = "<constant " + std::to_string(s.index) + ">";
      TXE_ASSIGN_OR_RETURN(ArrayType expected, ExpectedType(what, constants[s.index].dtype, constants[s.index].shape));
      TXE_RETURN_IF_ERROR(CheckParam(what, p, signature.parameters[p], expected));
    }
  }
  return mapping;
}

Status CheckOutputs(const ParamMapping& mapping, const std::vector<Leaf>& outputs) {
  if (outputs.size() != mapping.results.size()) {
    return InvalidArgumentError("HLO module '" + mapping.module_name + "' returns " +
                                std::to_string(mapping.results.size()) + " values but the function returned " +
                                std::to_string(outputs.size()) + " array leaves");
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    TXE_ASSIGN_OR_RETURN(ArrayType expected, ExpectedType(outputs[i].path, outputs[i].dtype, outputs[i].shape));
    if (mapping.results[i] != expected) {
      return InvalidArgumentError(outputs[i].path + ": HLO output " + std::to_string(i) + " is " +
                                  mapping.results[i].ToString() + " but the traced output is " + expected.ToString());
    }
  }
  return OkStatus();
}

StatusOr<ParamMapping> BuildParamMapping(const std::vector<Leaf>& leaves,
                                         const std::vector<ConstantSpec>& constants,
                                         const std::vector<int64_t>& kept_var_idx,
                                         std::string_view serialized_hlo_module_proto) {
  TXE_ASSIGN_OR_RETURN(HloSignature signature, ReadHloSignature(serialized_hlo_module_proto));
  return BuildParamMapping(leaves, constants, kept_var_idx, signature);
}

std::string ParamMapping::ToTable() const {
  std::vector<std::vector<std::string>> cells = {{"path", "kind", "kept", "hlo_param", "shape", "dtype"}};
  for (const ParamRow& r : rows) {
    const bool tensor = r.kind == LeafKind::kTensor;
    cells.push_back({r.path, LeafKindName(r.kind), tensor ? (r.kept ? "yes" : "no") : "-",
                     r.hlo_param >= 0 ? std::to_string(r.hlo_param) : "-", tensor ? ShapeString(r.shape) : "-",
                     tensor ? r.dtype : "= " + r.value});
  }
  for (const ConstantRow& c : constants) {
    cells.push_back({"<constant " + std::to_string(c.index) + ">", "constant", "yes",
                     c.hlo_param >= 0 ? std::to_string(c.hlo_param) : "-", ShapeString(c.shape), c.dtype});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  std::string out;
  for (const auto& line : cells) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) text += (i ? "  " : "") + (i + 1 < line.size() ? Pad(line[i], width[i]) : line[i]);
    out += text + "\n";
  }
  int64_t kept_leaves = 0;
  for (const ParamRow& r : rows) kept_leaves += r.kept ? 1 : 0;
  out += "HLO module '" + module_name + "': " + std::to_string(num_hlo_params()) + " parameters (" +
         std::to_string(constants.size()) + " hoisted constants, " + std::to_string(kept_leaves) +
         " kept leaves); outputs:";
  for (size_t i = 0; i < results.size(); ++i) out += (i ? ", " : " ") + results[i].ToString();
  return out;
}

}  // namespace txe::jax_call
