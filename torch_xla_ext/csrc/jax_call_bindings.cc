// Bindings of cc/jax_call: the HLO entry-signature reader and the leaf -> HLO parameter mapping.
// Leaves cross as plain tuples so the Python side needs no binding-specific classes to build them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cc/jax_call/hlo_signature.h"
#include "cc/jax_call/param_mapping.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
using txe::jax_call::ArrayType;
using txe::jax_call::ConstantRow;
using txe::jax_call::ConstantSpec;
using txe::jax_call::Leaf;
using txe::jax_call::LeafKind;
using txe::jax_call::ParamMapping;
using txe::jax_call::ParamRow;
using txe::jax_call::ParamSource;

namespace {

py::tuple TypeTuple(const ArrayType& t) {
  return py::make_tuple(txe::jax_call::PrimitiveTypeName(t.type), t.dims, t.ToString());
}

py::object OptionalIndex(int64_t i) { return i >= 0 ? py::object(py::int_(i)) : py::object(py::none()); }

}  // namespace

TXE_PYBIND_SUBMODULE(jax_call, m) {
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
      // One int per HLO parameter: a leaf index (>= 0), or ~k for hoisted constant k.
      .def_property_readonly("sources",
                             [](const ParamMapping& mp) {
                               std::vector<int64_t> out;
                               for (const ParamSource& s : mp.sources) {
                                 out.push_back(s.kind == ParamSource::Kind::kLeaf ? s.index : ~s.index);
                               }
                               return out;
                             })
      .def_property_readonly("results",
                             [](const ParamMapping& mp) {
                               py::list out;
                               for (const ArrayType& t : mp.results) out.append(TypeTuple(t));
                               return out;
                             })
      .def("to_table", &ParamMapping::ToTable);

  m.def(
      "read_hlo_signature",
      [](py::bytes proto) {
        std::string data = proto;
        auto sig = txe::python::ValueOrThrow(txe::jax_call::ReadHloSignature(data));
        py::list params, results;
        for (const ArrayType& t : sig.parameters) params.append(TypeTuple(t));
        for (const ArrayType& t : sig.flat_results()) results.append(TypeTuple(t));
        return py::make_tuple(sig.module_name, params, results);
      },
      py::arg("hlo_module_proto"),
      "(module_name, [(type, dims, text)] per parameter, [(type, dims, text)] per output) of a "
      "serialized HloModuleProto.");

  m.def(
      "build_param_mapping",
      [](const std::vector<std::tuple<std::string, std::string, std::string, std::vector<int64_t>, std::string>>& leaves,
         const std::vector<std::tuple<std::string, std::vector<int64_t>>>& constants,
         const std::vector<int64_t>& kept_var_idx, py::bytes proto,
         const std::optional<std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>>& outputs) {
        std::vector<Leaf> ls;
        ls.reserve(leaves.size());
        for (const auto& [path, kind, dtype, shape, value] : leaves) {
          if (kind != "tensor" && kind != "static") {
            throw py::value_error(path + ": leaf kind must be 'tensor' or 'static', got '" + kind + "'");
          }
          ls.push_back(Leaf{path, kind == "tensor" ? LeafKind::kTensor : LeafKind::kStatic, dtype, shape, value});
        }
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
