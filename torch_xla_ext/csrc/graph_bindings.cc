// Bindings of cc/graph: the value graph of a StableHLO function as classes, the one input layout
// of every analysis over it (the collectives analysis, cc/collectives/analysis.h, and the rounding
// points, cc/parity/rounding.h). torch_xla_ext/_mlir_graph.py builds it from a module parsed with
// JAX's MLIR bindings (`core_graph`). A shared submodule: the analyses' submodules take `Graph`.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cc/graph/graph.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
using txe::graph::Graph;
using txe::graph::Op;
using txe::graph::TensorType;

TXE_PYBIND_SHARED_SUBMODULE(graph, m) {
  py::class_<TensorType>(m, "TensorType", "A value's type: its shape and MLIR element type ('' for a non-tensor).")
      .def(py::init([](std::vector<int64_t> shape, std::string element_type) {
             return TensorType{std::move(shape), std::move(element_type)};
           }),
           py::arg("shape"), py::arg("element_type"))
      .def_readonly("shape", &TensorType::shape, "-1 for a dynamic dimension; empty for a scalar.")
      .def_readonly("element_type", &TensorType::element_type, "MLIR's spelling: 'f32', 'bf16', 'i64'.")
      .def("__repr__", [](const TensorType& t) {
        std::string dims;
        for (int64_t d : t.shape) dims += std::to_string(d) + "x";
        return "<TensorType " + dims + t.element_type + ">";
      });

  py::class_<Op>(m, "Op", "One op of a function, in pre-order (see cc/graph/graph.h).")
      .def(py::init([](std::string name, std::vector<int64_t> operands, std::vector<int64_t> results, int64_t parent,
                       std::vector<int64_t> region_args, std::string reduction,
                       std::vector<std::vector<int64_t>> replica_groups, std::optional<double> splat_value,
                       std::vector<std::pair<std::string, std::string>> attributes) {
             Op op;
             op.name = std::move(name);
             op.operands = std::move(operands);
             op.results = std::move(results);
             op.parent = parent;
             op.region_args = std::move(region_args);
             op.reduction = std::move(reduction);
             op.replica_groups = std::move(replica_groups);
             op.splat_value = splat_value;
             op.attributes = std::move(attributes);
             return op;
           }),
           py::arg("name"), py::arg("operands"), py::arg("results"), py::kw_only(), py::arg("parent") = -1,
           py::arg("region_args") = std::vector<int64_t>{}, py::arg("reduction") = "",
           py::arg("replica_groups") = std::vector<std::vector<int64_t>>{}, py::arg("splat_value") = py::none(),
           py::arg("attributes") = std::vector<std::pair<std::string, std::string>>{})
      .def_readonly("name", &Op::name)
      .def_readonly("operands", &Op::operands, "Value ids.")
      .def_readonly("results", &Op::results, "Value ids.")
      .def_readonly("parent", &Op::parent, "The op whose region holds this one; -1 at the function's top level.")
      .def_readonly("region_args", &Op::region_args, "Block arguments of this op's regions (value ids).")
      .def_readonly("reduction", &Op::reduction, "The one op of a single-op reduction body, or ''.")
      .def_readonly("replica_groups", &Op::replica_groups)
      .def_readonly("splat_value", &Op::splat_value, "A splat constant's element value.")
      .def_readonly("attributes", &Op::attributes, "Attributes an analysis reads, as (key, text) pairs.")
      .def("__repr__", [](const Op& op) { return "<Op " + op.name + ">"; });

  py::class_<Graph>(m, "Graph",
                    "A function's value graph: values by id (the arguments first), ops in pre-order, the "
                    "returned value ids. Checked when built (ids in range, each value defined once and "
                    "before its use): InvalidArgumentError naming the op otherwise.")
      .def(py::init([](std::vector<TensorType> values, int64_t num_args, std::vector<Op> ops,
                       std::vector<int64_t> returned) {
             Graph g;
             g.values = std::move(values);
             g.num_args = num_args;
             g.ops = std::move(ops);
             g.returned = std::move(returned);
             txe::python::ThrowIfError(txe::graph::Validate(g));
             return g;
           }),
           py::arg("values"), py::arg("num_args"), py::arg("ops"), py::arg("returned"))
      .def_readonly("values", &Graph::values)
      .def_readonly("num_args", &Graph::num_args)
      .def_readonly("ops", &Graph::ops)
      .def_readonly("returned", &Graph::returned)
      .def("__repr__", [](const Graph& g) {
        return "<Graph " + std::to_string(g.values.size()) + " values, " + std::to_string(g.num_args) + " arguments, " +
               std::to_string(g.ops.size()) + " ops>";
      });
}
