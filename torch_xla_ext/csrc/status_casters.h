// The one place where a txe::Status becomes a Python exception: the class is
// torch_xla_ext.errors.BY_CODE[code] (InvalidArgumentError is a ValueError, NotFoundError a
// FileNotFoundError, ...), with `.code` the status code name. Bindings return through these
// helpers and never throw pybind11's builtin exceptions themselves. Call with the GIL held.
#ifndef TXE_PYTHON_STATUS_CASTERS_H_
#define TXE_PYTHON_STATUS_CASTERS_H_

#include <utility>

#include "cc/common/status.h"

namespace txe::python {

[[noreturn]] void ThrowStatus(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return std::move(value).value();
}

}  // namespace txe::python

#endif  // TXE_PYTHON_STATUS_CASTERS_H_
