// Bindings of cc/parity: the rounding-point analysis over the value graph of a StableHLO
// function (cc/graph/graph.h), built in Python from a module parsed with JAX's MLIR bindings
// (torch_xla_ext/parity/stablehlo.py). The replay that uses it is torch_xla_ext/parity/replay.py.
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
  m.def(
      "find_rounding_points",
      [](const txe::graph::Graph& g, bool excess_precision) {
        txe::parity::RoundingOptions options;
        options.excess_precision = excess_precision;
        txe::StatusOr<txe::parity::RoundingAnalysis> result = txe::InternalError("not run");
        {
          py::gil_scoped_release release;  // large programs have tens of thousands of ops
          result = txe::parity::FindRoundingPoints(g, options);
        }
        txe::parity::RoundingAnalysis a = txe::python::ValueOrThrow(std::move(result));
        py::list points;
        for (const txe::parity::RoundingPoint& p : a.points) {
          py::dict d;
          d["op"] = p.op;
          d["result"] = p.result;
          d["value"] = p.value;
          d["element_type"] = p.element_type;
          py::list unrounded;
          for (const txe::graph::Use& u : p.unrounded_uses) unrounded.append(py::make_tuple(u.op, u.operand));
          d["unrounded_uses"] = unrounded;
          d["after"] = p.after;
          points.append(d);
        }
        py::dict out;
        out["points"] = points;
        out["kept_unrounded"] = a.kept_unrounded;
        return out;
      },
      py::arg("graph"), py::arg("excess_precision") = true,
      "Rounding points of one function's graph (a graph.Graph). See cc/parity/rounding.h.");

  m.def(
      "op_class",
      [](const std::string& name) -> const char* {
        switch (txe::parity::Classify(name)) {
          case txe::parity::OpClass::kMovesData: return "moves_data";
          case txe::parity::OpClass::kExact: return "exact";
          case txe::parity::OpClass::kOpaque: return "opaque";
          case txe::parity::OpClass::kComputes: return "computes";
        }
        return "computes";
      },
      py::arg("name"), "What an op does to its values: moves_data, exact, opaque or computes.");

  m.def("is_narrow_float", [](const std::string& element_type) { return txe::parity::IsNarrowFloat(element_type); },
        py::arg("element_type"), "Whether XLA:CPU computes this element type in f32 and rounds back (bf16, f16).");
}
