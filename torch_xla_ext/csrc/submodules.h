// Each component's binding file registers its submodule of `torch_xla_ext._ext` with
// TXE_PYBIND_SUBMODULE(name, m) { ... }, so adding a component touches no shared source. A
// submodule whose classes other submodules take or return (the value graph of cc/graph) registers
// with TXE_PYBIND_SHARED_SUBMODULE: shared ones are initialised first, so the signatures of the
// functions that take their classes name those classes, not C++ types.
#ifndef TXE_PYTHON_SUBMODULES_H_
#define TXE_PYTHON_SUBMODULES_H_

#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <vector>

namespace txe::python {

using SubmoduleInit = void (*)(pybind11::module_&);

struct Submodule {
  bool shared;  // initialised before every component submodule
  std::string name;
  SubmoduleInit init;
};

std::vector<Submodule>& SubmoduleRegistry();

struct SubmoduleRegistration {
  SubmoduleRegistration(const char* name, SubmoduleInit init, bool shared = false) {
    SubmoduleRegistry().push_back({shared, name, init});
  }
};

}  // namespace txe::python

#define TXE_PYBIND_SUBMODULE(name, m)                                              \
  static void TxeInitSubmodule_##name(pybind11::module_& m);                       \
  static ::txe::python::SubmoduleRegistration txe_submodule_registration_##name(   \
      #name, &TxeInitSubmodule_##name);                                            \
  static void TxeInitSubmodule_##name(pybind11::module_& m)

#define TXE_PYBIND_SHARED_SUBMODULE(name, m)                                       \
  static void TxeInitSubmodule_##name(pybind11::module_& m);                       \
  static ::txe::python::SubmoduleRegistration txe_submodule_registration_##name(   \
      #name, &TxeInitSubmodule_##name, /*shared=*/true);                           \
  static void TxeInitSubmodule_##name(pybind11::module_& m)

#endif  // TXE_PYTHON_SUBMODULES_H_
