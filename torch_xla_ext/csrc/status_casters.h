// The one place where a txe::Status becomes a Python exception:
//   INVALID_ARGUMENT -> ValueError, NOT_FOUND -> FileNotFoundError, OUT_OF_RANGE -> IndexError,
//   UNIMPLEMENTED -> NotImplementedError, FAILED_PRECONDITION / INTERNAL -> RuntimeError.
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
