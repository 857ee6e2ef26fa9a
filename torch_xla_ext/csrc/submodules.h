// Each component's binding file registers its submodule of `torch_xla_ext._ext` with
// TXE_PYBIND_SUBMODULE(name, m) { ... }, so adding a component touches no shared source.
#ifndef TXE_PYTHON_SUBMODULES_H_
#define TXE_PYTHON_SUBMODULES_H_

#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace txe::python {

using SubmoduleInit = void (*)(pybind11::module_&);

std::vector<std::pair<std::string, SubmoduleInit>>& SubmoduleRegistry();

struct SubmoduleRegistration {
  SubmoduleRegistration(const char* name, SubmoduleInit init) {
    SubmoduleRegistry().emplace_back(name, init);
  }
};

}  // namespace txe::python

#define TXE_PYBIND_SUBMODULE(name, m)                                              \
  static void TxeInitSubmodule_##name(pybind11::module_& m);                       \
  static ::txe::python::SubmoduleRegistration txe_submodule_registration_##name(   \
      #name, &TxeInitSubmodule_##name);                                            \
  static void TxeInitSubmodule_##name(pybind11::module_& m)

#endif  // TXE_PYTHON_SUBMODULES_H_
