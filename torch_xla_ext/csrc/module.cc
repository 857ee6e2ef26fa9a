// torch_xla_ext._ext: the one private extension module. Components add submodules through
// TXE_PYBIND_SUBMODULE in their own *_bindings.cc.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>

#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;

namespace txe::python {

namespace {

// torch_xla_ext.errors.from_status, looked up once when the module is imported. Leaked on
// purpose: the interpreter may already be finalising when a static destructor would run.
PyObject* g_from_status = nullptr;

}  // namespace

std::vector<Submodule>& SubmoduleRegistry() {
  static auto* registry = new std::vector<Submodule>();
  return *registry;
}

void ThrowStatus(const Status& status) {
  // A caller that throws an OK status has a bug; say so rather than raise an empty error.
  const std::string code = status.ok() ? "INTERNAL" : StatusCodeName(status.code());
  const std::string message = status.ok() ? "ThrowStatus called with an OK status" : status.message();
  // errors.from_status(code, message) -> the instance of errors.BY_CODE[code] (code kept on .code).
  py::object error = py::reinterpret_borrow<py::object>(g_from_status)(code, message);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

}  // namespace txe::python

PYBIND11_MODULE(_ext, m) {
  m.doc() = "torch_xla_ext private extension: C++ core bindings (use the torch_xla_ext modules)";
  // The one Status -> exception table lives in Python (errors.BY_CODE); every binding raises
  // through it, so a C++ error is the same class as the one Python code raises for that code.
  py::module_ errors = py::module_::import("torch_xla_ext.errors");
  txe::python::g_from_status = py::object(errors.attr("from_status")).release().ptr();
  auto& registry = txe::python::SubmoduleRegistry();
  // Static-initialisation order across files is unspecified; sort for a stable module layout,
  // shared submodules (classes other submodules use) first.
  std::sort(registry.begin(), registry.end(), [](const txe::python::Submodule& a, const txe::python::Submodule& b) {
    return a.shared != b.shared ? a.shared : a.name < b.name;
  });
  for (const txe::python::Submodule& s : registry) {
    py::module_ sub = m.def_submodule(s.name.c_str());
    s.init(sub);
  }
}
