// Bindings of cc/parity: the rounding-point analysis over the value graph of a StableHLO
// function (cc/graph/graph.h), built in Python from a module parsed with JAX's MLIR bindings
// (torch_xla_ext/parity/program/stablehlo.py). The rounded replay that applies it is
// torch_xla_ext/parity/program/rewrite.py. Results are typed: RoundingAnalysis, RoundingPoint and
// the OpClass enum, read by attribute.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cc/graph/graph.h"
#include "cc/parity/rounding.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;

TXE_PYBIND_SUBMODULE(parity, m) {
  using txe::parity::OpClass;
  using txe::parity::RoundingAnalysis;
  using txe::parity::RoundingPoint;

  py::enum_<OpClass>(m, "OpClass", "What an op does to the values it produces (cc/parity/rounding.h).")
      .value("MOVES_DATA", OpClass::kMovesData)
      .value("EXACT", OpClass::kExact)
      .value("OPAQUE", OpClass::kOpaque)
      .value("COMPUTES", OpClass::kComputes);

  py::class_<RoundingPoint>(m, "RoundingPoint", "An op result the program rounds to a narrow float.")
      .def_readonly("op", &RoundingPoint::op, "index into the graph's ops")
      .def_readonly("result", &RoundingPoint::result, "which result of the op")
      .def_readonly("value", &RoundingPoint::value, "its value id")
      .def_readonly("element_type", &RoundingPoint::element_type)
      .def_property_readonly(
          "unrounded_uses",
          [](const RoundingPoint& p) {
            std::vector<std::pair<int64_t, int64_t>> uses;
            uses.reserve(p.unrounded_uses.size());
            for (const txe::graph::Use& u : p.unrounded_uses) uses.emplace_back(u.op, u.operand);
            return uses;
          },
          "(op, operand) of each use that reads the value before rounding (excess precision)")
      .def_readonly("after", &RoundingPoint::after,
                    "the rounding point whose rounded value this op reads through data movement, or -1");

  py::class_<RoundingAnalysis>(m, "RoundingAnalysis", "The rounding points of one function.")
      .def_readonly("points", &RoundingAnalysis::points, "in op order, then result order")
      .def_readonly("kept_unrounded", &RoundingAnalysis::kept_unrounded,
                    "ops computing a narrow value that every use reads unrounded");

  m.def(
      "find_rounding_points",
      [](const txe::graph::Graph& g, bool excess_precision) {
        txe::parity::RoundingOptions options;
        options.excess_precision = excess_precision;
        txe::StatusOr<RoundingAnalysis> result = txe::InternalError("not run");
        {
          py::gil_scoped_release release;  // large programs have tens of thousands of ops
          result = txe::parity::FindRoundingPoints(g, options);
        }
        return txe::python::ValueOrThrow(std::move(result));
      },
      py::arg("graph"), py::arg("excess_precision") = true,
      "Rounding points of one function's graph (a graph.Graph). See cc/parity/rounding.h.");

  m.def("op_class", [](const std::string& name) { return txe::parity::Classify(name); }, py::arg("name"),
        "What an op does to its values (OpClass).");

  m.def("is_narrow_float", [](const std::string& element_type) { return txe::parity::IsNarrowFloat(element_type); },
        py::arg("element_type"), "Whether XLA:CPU computes this element type in f32 and rounds back (bf16, f16).");
}
