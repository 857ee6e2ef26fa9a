// Bindings of cc/parity: the HLO op/dtype graph parsed from HLO text, and its rounding points.
// Python (torch_xla_ext/parity.py) replays the graph on numpy with XLA's roundings.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "cc/parity/hlo_graph.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
using txe::parity::HloComputation;
using txe::parity::HloInstruction;
using txe::parity::HloModule;
using txe::parity::HloShape;
using txe::parity::RoundingPoint;

TXE_PYBIND_SUBMODULE(parity, m) {
  py::class_<HloShape>(m, "HloShape")
      .def_readonly("element_type", &HloShape::element_type)
      .def_readonly("dims", &HloShape::dims)
      .def_readonly("tuple_shapes", &HloShape::tuple_shapes)
      .def_property_readonly("is_tuple", &HloShape::is_tuple)
      .def("__str__", &HloShape::ToString);

  py::class_<HloInstruction>(m, "HloInstruction")
      .def_readonly("name", &HloInstruction::name)
      .def_readonly("shape", &HloInstruction::shape)
      .def_readonly("opcode", &HloInstruction::opcode)
      .def_readonly("operands", &HloInstruction::operands)
      .def_readonly("literal", &HloInstruction::literal)
      .def_readonly("attributes", &HloInstruction::attributes)
      .def_readonly("is_root", &HloInstruction::is_root);

  py::class_<HloComputation>(m, "HloComputation")
      .def_readonly("name", &HloComputation::name)
      .def_readonly("is_entry", &HloComputation::is_entry)
      .def_readonly("instructions", &HloComputation::instructions)
      .def_readonly("root", &HloComputation::root);

  py::class_<HloModule>(m, "HloModule")
      .def_readonly("name", &HloModule::name)
      .def_readonly("computations", &HloModule::computations)
      .def_readonly("entry", &HloModule::entry);

  py::class_<RoundingPoint>(m, "RoundingPoint")
      .def_readonly("computation", &RoundingPoint::computation)
      .def_readonly("instruction", &RoundingPoint::instruction)
      .def_readonly("opcode", &RoundingPoint::opcode)
      .def_readonly("element_type", &RoundingPoint::element_type)
      .def_readonly("after", &RoundingPoint::after)
      .def_readonly("after_opcode", &RoundingPoint::after_opcode);

  m.def(
      "parse_hlo_text",
      [](std::string text) {
        txe::StatusOr<HloModule> module = txe::InternalError("not run");
        {
          py::gil_scoped_release release;  // large modules are megabytes of text
          module = txe::parity::ParseHloText(text);
        }
        return txe::python::ValueOrThrow(std::move(module));
      },
      py::arg("text"), "Parses HLO text into computations and instructions. See cc/parity/hlo_graph.h.");

  m.def(
      "find_rounding_points",
      [](const HloModule& module, bool excess_precision) {
        txe::parity::RoundingPointOptions options;
        options.excess_precision = excess_precision;
        return txe::parity::FindRoundingPoints(module, options);
      },
      py::arg("module"), py::arg("excess_precision") = true,
      "Ops storing a computed value in bf16/f16, with the narrow-float op feeding each, if any.");
}
