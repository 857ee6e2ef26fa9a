// Bindings of cc/collectives: the analysis of main's value graph (a `graph.Graph`, built in Python
// by torch_xla_ext/_mlir_graph.py) and the all-reduce hook API. Results cross as classes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cc/collectives/analysis.h"
#include "cc/collectives/hooks.h"
#include "cc/graph/graph.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
namespace tc = txe::collectives;

namespace {

std::string KindName(tc::InputKind kind) { return tc::InputKindName(kind); }

}  // namespace

TXE_PYBIND_SUBMODULE(collectives, m) {
  py::class_<tc::DeclaredInput>(m, "DeclaredInput", "What the exporter says one argument of main is.")
      .def(py::init([](const std::string& kind, std::optional<double> scalar_value) {
             return tc::DeclaredInput{txe::python::ValueOrThrow(tc::InputKindFromName(kind)), scalar_value};
           }),
           py::arg("kind"), py::arg("scalar_value") = py::none(),
           "kind: user_input, parameter, buffer, constant or collective_token; scalar_value: a scalar "
           "constant's value (a scale may come from an argument).")
      .def_property_readonly("kind", [](const tc::DeclaredInput& d) { return KindName(d.kind); })
      .def_readonly("scalar_value", &tc::DeclaredInput::scalar_value);

  py::class_<tc::Collective>(m, "Collective", "One collective op of main, in program order.")
      .def_readonly("op_index", &tc::Collective::op_index, "Index into the graph's ops.")
      .def_readonly("op", &tc::Collective::op, "'all_reduce', 'all_gather', 'reduce_scatter', ...")
      .def_property_readonly(
          "reduce",
          [](const tc::Collective& c) { return c.reduce.empty() ? std::nullopt : std::optional<std::string>(c.reduce); },
          "'sum', 'max', 'min', 'mul', 'and', 'or', 'xor'; None when the op has no reduction.")
      .def_readonly("replica_groups", &tc::Collective::replica_groups)
      .def_readonly("token_operands", &tc::Collective::token_operands, "Operand positions holding a token.")
      .def_readonly("token_input", &tc::Collective::token_input, "The argument of main the token comes from.")
      .def_readonly("token_mixed_into_operand", &tc::Collective::token_mixed_into_operand)
      .def_readonly("operand_inputs", &tc::Collective::operand_inputs,
                    "Arguments of main the data operands depend on, ascending.")
      .def_readonly("scale", &tc::Collective::scale)
      .def_readonly("scale_op_index", &tc::Collective::scale_op_index, "The multiply (or divide) that applies the scale.")
      .def("__repr__", [](const tc::Collective& c) { return "<Collective " + c.op + " " + c.reduce + ">"; });

  py::class_<tc::Analysis>(m, "Analysis", "Argument kinds and collectives of main (cc/collectives/analysis.h).")
      .def_property_readonly(
          "input_kinds",
          [](const tc::Analysis& a) {
            std::vector<std::string> out;
            out.reserve(a.input_kinds.size());
            for (tc::InputKind k : a.input_kinds) out.push_back(KindName(k));
            return out;
          },
          "One per argument of main: user_input, parameter, buffer, constant or collective_token.")
      .def_readonly("input_used", &tc::Analysis::input_used, "Whether main uses each argument at all.")
      .def_readonly("collectives", &tc::Analysis::collectives, "In program order.")
      .def_readonly("token_inputs", &tc::Analysis::token_inputs, "Arguments that are tokens, ascending.");

  py::class_<tc::AllReduceCall>(m, "AllReduceCall", "One recorded all-reduce lowering (cc/collectives/hooks.h).")
      .def_readonly("sequence", &tc::AllReduceCall::sequence)
      .def_readonly("reduce", &tc::AllReduceCall::reduce)
      .def_readonly("requested_scale", &tc::AllReduceCall::requested_scale, "What the caller asked for.")
      .def_readonly("applied_scale", &tc::AllReduceCall::applied_scale, "What the lowering applied.")
      .def_readonly("replica_groups", &tc::AllReduceCall::replica_groups)
      .def_readonly("world_size", &tc::AllReduceCall::world_size)
      .def_readonly("lowering", &tc::AllReduceCall::lowering, "What the lowering says it emitted.")
      .def("__repr__", [](const tc::AllReduceCall& c) {
        return "<AllReduceCall #" + std::to_string(c.sequence) + " " + c.reduce + " " + c.lowering + ">";
      });

  m.def(
      "analyze",
      [](const txe::graph::Graph& graph, const std::vector<tc::DeclaredInput>& declared) {
        txe::StatusOr<tc::Analysis> result = txe::InternalError("not run");
        {
          py::gil_scoped_release release;
          result = tc::Analyze(graph, declared);
        }
        return txe::python::ValueOrThrow(std::move(result));
      },
      py::arg("graph"), py::arg("declared"),
      "Analyses main's graph; `declared` has one entry per argument. See cc/collectives/analysis.h.");

  m.def(
      "record_all_reduce",
      [](const std::string& reduce, double requested_scale, double applied_scale,
         std::vector<std::vector<int64_t>> replica_groups, int64_t world_size,
         const std::string& lowering) {
        tc::AllReduceCall c;
        c.reduce = reduce;
        c.requested_scale = requested_scale;
        c.applied_scale = applied_scale;
        c.replica_groups = std::move(replica_groups);
        c.world_size = world_size;
        c.lowering = lowering;
        return txe::python::ValueOrThrow(tc::RecordAllReduce(std::move(c)));
      },
      py::arg("reduce"), py::arg("requested_scale"), py::arg("applied_scale"),
      py::arg("replica_groups"), py::arg("world_size"), py::arg("lowering"),
      "Records one all-reduce lowering (cc/collectives/hooks.h); returns its sequence number.");
  m.def(
      "reduce_names",
      [] {
        std::vector<std::string> out;
        for (const auto& [op, name] : tc::ReduceNames()) out.push_back(name);
        return out;
      },
      "Every reduce name the analysis reports for a reduction body ('sum', ..., 'xor'), in order.");
  m.def("next_all_reduce_sequence", &tc::NextAllReduceSequence);
  m.def("recorded_all_reduces_since", &tc::RecordedAllReducesSince, py::arg("sequence"),
        "Recorded all-reduce calls with sequence >= `sequence`, oldest first.");
  m.def("clear_recorded_all_reduces", &tc::ClearRecordedAllReduces);
}
