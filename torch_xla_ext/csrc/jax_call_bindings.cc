// Bindings of cc/jax_call: the HLO entry-signature reader and the leaf -> HLO parameter mapping.
// Leaves cross in as plain tuples (typed in _ext.pyi) so Python needs no binding classes to build
// them; results cross out as classes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cc/jax_call/hlo_signature.h"
#include "cc/jax_call/param_mapping.h"
#include "cc/common/status.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
using txe::jax_call::ArrayType;
using txe::jax_call::ConstantRow;
using txe::jax_call::ConstantSpec;
using txe::jax_call::HloSignature;
using txe::jax_call::Leaf;
using txe::jax_call::LeafKind;
using txe::jax_call::ParamMapping;
using txe::jax_call::ParamRow;
using txe::jax_call::ParamSource;

namespace {

std::optional<int64_t> OptionalIndex(int64_t i) { return i >= 0 ? std::optional<int64_t>(i) : std::nullopt; }

using LeafTuple = std::tuple<std::string, std::string, std::string, std::vector<int64_t>, std::string>;

txe::StatusOr<std::vector<Leaf>> LeavesFromTuples(const std::vector<LeafTuple>& leaves) {
  std::vector<Leaf> out;
  out.reserve(leaves.size());
  for (const auto& [path, kind, dtype, shape, value] : leaves) {
    if (kind != "tensor" && kind != "static") {
      return txe::InvalidArgumentError(path + ": leaf kind must be 'tensor' or 'static', got '" + kind + "'");
    }
    out.push_back(Leaf{path, kind == "tensor" ? LeafKind::kTensor : LeafKind::kStatic, dtype, shape, value});
  }
  return out;
}

}  // namespace

TXE_PYBIND_SUBMODULE(jax_call, m) {
  py::class_<ArrayType>(m, "ArrayType", "One array (or tuple) type of an HLO signature.")
      .def_property_readonly("element_type", [](const ArrayType& t) { return txe::jax_call::PrimitiveTypeName(t.type); },
                             "HLO's short name: 'f32', 'bf16', 'pred', 'tuple'.")
      .def_readonly("dims", &ArrayType::dims)
      .def_readonly("tuple_shapes", &ArrayType::tuple, "The elements when element_type is 'tuple'.")
      .def("__str__", &ArrayType::ToString)
      .def("__repr__", [](const ArrayType& t) { return "<ArrayType " + t.ToString() + ">"; });

  py::class_<HloSignature>(m, "HloSignature", "The entry signature of an HloModuleProto.")
      .def_readonly("module_name", &HloSignature::module_name)
      .def_readonly("parameters", &HloSignature::parameters)
      .def_property_readonly("results", &HloSignature::flat_results, "The result, flattened one tuple level.");

  py::class_<ParamSource>(m, "ParamSource", "Where one HLO parameter's value comes from.")
      .def_property_readonly("kind", [](const ParamSource& s) {
        return std::string(s.kind == ParamSource::Kind::kLeaf ? "leaf" : "constant");
      }, "'leaf' (index into the flattened leaves) or 'constant' (index into the hoisted constants).")
      .def_readonly("index", &ParamSource::index);

  py::class_<ParamRow>(m, "ParamRow")
      .def_readonly("path", &ParamRow::path)
      .def_property_readonly("kind", [](const ParamRow& r) { return txe::jax_call::LeafKindName(r.kind); })
      .def_readonly("kept", &ParamRow::kept)
      .def_property_readonly("hlo_param", [](const ParamRow& r) { return OptionalIndex(r.hlo_param); })
      .def_readonly("shape", &ParamRow::shape)
      .def_readonly("dtype", &ParamRow::dtype)
      .def_readonly("value", &ParamRow::value);

  py::class_<ConstantRow>(m, "ConstantRow")
      .def_readonly("index", &ConstantRow::index)
      .def_property_readonly("hlo_param", [](const ConstantRow& c) { return OptionalIndex(c.hlo_param); })
      .def_readonly("shape", &ConstantRow::shape)
      .def_readonly("dtype", &ConstantRow::dtype);

  py::class_<ParamMapping>(m, "ParamMapping")
      .def_readonly("module_name", &ParamMapping::module_name)
      .def_readonly("rows", &ParamMapping::rows)
      .def_readonly("constants", &ParamMapping::constants)
      .def_property_readonly("num_hlo_params", &ParamMapping::num_hlo_params)
      .def_readonly("sources", &ParamMapping::sources, "One ParamSource per HLO parameter, in order.")
      .def_readonly("results", &ParamMapping::results)
      .def("to_table", &ParamMapping::ToTable);

  m.def(
      "read_hlo_signature",
      [](py::bytes proto) {
        std::string data = proto;
        return txe::python::ValueOrThrow(txe::jax_call::ReadHloSignature(data));
      },
      py::arg("hlo_module_proto"), "The entry signature of a serialized HloModuleProto.");

  m.def(
      "build_param_mapping",
      [](const std::vector<LeafTuple>& leaves,
         const std::vector<std::tuple<std::string, std::vector<int64_t>>>& constants,
         const std::vector<int64_t>& kept_var_idx, py::bytes proto,
         const std::optional<std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>>& outputs) {
        std::vector<Leaf> ls = txe::python::ValueOrThrow(LeavesFromTuples(leaves));
        std::vector<ConstantSpec> cs;
        for (const auto& [dtype, shape] : constants) cs.push_back(ConstantSpec{dtype, shape});
        std::vector<Leaf> outs;
        if (outputs.has_value()) {
          for (const auto& [path, dtype, shape] : *outputs) outs.push_back(Leaf{path, LeafKind::kTensor, dtype, shape, ""});
        }
        std::string data = proto;
        txe::StatusOr<ParamMapping> mapping = txe::InternalError("not run");
        {
          py::gil_scoped_release release;
          mapping = txe::jax_call::BuildParamMapping(ls, cs, kept_var_idx, data);
          if (mapping.ok() && outputs.has_value()) {
            txe::Status checked = txe::jax_call::CheckOutputs(*mapping, outs);
            if (!checked.ok()) mapping = checked;
          }
        }
        return txe::python::ValueOrThrow(std::move(mapping));
      },
      py::arg("leaves"), py::arg("constants"), py::arg("kept_var_idx"), py::arg("hlo_module_proto"),
      py::arg("outputs") = py::none(),
      "Maps leaves (path, 'tensor'|'static', dtype, shape, value) and hoisted constants (dtype, "
      "shape) to HLO parameters via JAX's kept_var_idx, checked against the module; with outputs "
      "[(path, dtype, shape)], checks the module's results too. See cc/jax_call/param_mapping.h.");
}
