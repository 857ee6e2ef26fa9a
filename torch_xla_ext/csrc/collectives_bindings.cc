// Bindings of cc/collectives: the analysis takes the graph as plain tuples (built in Python from
// a module parsed with JAX's MLIR bindings) and returns plain dicts; the hook API is exposed as is.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cc/collectives/analysis.h"
#include "cc/collectives/hooks.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
namespace tc = txe::collectives;

namespace {

using ValueTuple = std::tuple<std::vector<int64_t>, std::string>;
using OpTuple = std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>, std::string,
                           std::vector<std::vector<int64_t>>, std::optional<double>>;
using DeclaredTuple = std::tuple<std::string, std::optional<double>>;

py::dict CallToDict(const tc::AllReduceCall& c) {
  py::dict d;
  d["sequence"] = c.sequence;
  d["reduce"] = c.reduce;
  d["requested_scale"] = c.requested_scale;
  d["applied_scale"] = c.applied_scale;
  d["replica_groups"] = c.replica_groups;
  d["world_size"] = c.world_size;
  d["lowering"] = c.lowering;
  return d;
}

}  // namespace

TXE_PYBIND_SUBMODULE(collectives, m) {
  m.def(
      "analyze",
      [](const std::vector<ValueTuple>& values, int64_t num_args, const std::vector<OpTuple>& ops,
         const std::vector<int64_t>& returned, const std::vector<DeclaredTuple>& declared) {
        tc::Graph g;
        g.num_args = num_args;
        g.values.reserve(values.size());
        for (const auto& [shape, et] : values) g.values.push_back({shape, et});
        g.ops.reserve(ops.size());
        for (const auto& [name, operands, results, reduction, groups, splat] : ops) {
          g.ops.push_back({name, operands, results, reduction, groups, splat});
        }
        g.returned = returned;
        std::vector<tc::DeclaredInput> decl;
        for (const auto& [kind, value] : declared) {
          decl.push_back({txe::python::ValueOrThrow(tc::InputKindFromName(kind)), value});
        }
        txe::StatusOr<tc::Analysis> result = txe::InternalError("not run");
        {
          py::gil_scoped_release release;
          result = tc::Analyze(g, decl);
        }
        tc::Analysis a = txe::python::ValueOrThrow(std::move(result));
        py::list kinds, collectives;
        for (tc::InputKind k : a.input_kinds) kinds.append(tc::InputKindName(k));
        for (const tc::Collective& c : a.collectives) {
          py::dict d;
          d["op_index"] = c.op_index;
          d["op"] = c.op;
          d["reduce"] = c.reduce.empty() ? py::object(py::none()) : py::object(py::str(c.reduce));
          d["replica_groups"] = c.replica_groups;
          d["token_operands"] = c.token_operands;
          d["token_input"] = c.token_input;
          d["token_mixed_into_operand"] = c.token_mixed_into_operand;
          d["operand_inputs"] = c.operand_inputs;
          d["scale"] = c.scale;
          d["scale_op_index"] = c.scale_op_index;
          collectives.append(d);
        }
        py::dict out;
        out["input_kinds"] = kinds;
        out["input_used"] = a.input_used;
        out["collectives"] = collectives;
        out["token_inputs"] = a.token_inputs;
        return out;
      },
      py::arg("values"), py::arg("num_args"), py::arg("ops"), py::arg("returned"),
      py::arg("declared"),
      "Analyses main's graph: values are (shape, element_type); ops are (name, operands, "
      "results, reduction, replica_groups, splat_value); declared are (kind, scalar_value). "
      "See cc/collectives/analysis.h.");

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
  m.def("next_all_reduce_sequence", &tc::NextAllReduceSequence);
  m.def("recorded_all_reduces_since", [](int64_t sequence) {
    py::list out;
    for (const tc::AllReduceCall& c : tc::RecordedAllReducesSince(sequence)) out.append(CallToDict(c));
    return out;
  }, py::arg("sequence"));
  m.def("clear_recorded_all_reduces", &tc::ClearRecordedAllReduces);
}
