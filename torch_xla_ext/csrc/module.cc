// torch_xla_ext._ext: the one private extension module. Components add submodules through
// TXE_PYBIND_SUBMODULE in their own *_bindings.cc.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <algorithm>

#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;

namespace txe::python {

std::vector<std::pair<std::string, SubmoduleInit>>& SubmoduleRegistry() {
  static auto* registry = new std::vector<std::pair<std::string, SubmoduleInit>>();
  return *registry;
}

void ThrowStatus(const Status& status) {
  PyObject* type = PyExc_RuntimeError;
  switch (status.code()) {
    case StatusCode::kInvalidArgument: type = PyExc_ValueError; break;
    case StatusCode::kNotFound: type = PyExc_FileNotFoundError; break;
    case StatusCode::kOutOfRange: type = PyExc_IndexError; break;
    case StatusCode::kUnimplemented: type = PyExc_NotImplementedError; break;
    case StatusCode::kOk:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInternal: type = PyExc_RuntimeError; break;
  }
  PyErr_SetString(type, status.message().c_str());
  throw py::error_already_set();
}

}  // namespace txe::python

PYBIND11_MODULE(_ext, m) {
  m.doc() = "torch_xla_ext private extension: C++ core bindings (use the torch_xla_ext modules)";
  auto& registry = txe::python::SubmoduleRegistry();
  // Static-initialisation order across files is unspecified; sort for a stable module layout.
  std::sort(registry.begin(), registry.end());
  for (auto& [name, init] : registry) {
    py::module_ sub = m.def_submodule(name.c_str());
    init(sub);
  }
}
