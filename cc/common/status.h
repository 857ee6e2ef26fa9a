// A small Status / StatusOr so that cc/ builds and links alone (no absl) inside a torch_xla fork.
// Codes follow absl's names; torch_xla_ext/csrc/status_casters.h is the one place that turns
// them into Python exceptions.
#ifndef TXE_CC_COMMON_STATUS_H_
#define TXE_CC_COMMON_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace txe {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 3,    // ValueError
  kNotFound = 5,           // FileNotFoundError
  kFailedPrecondition = 9, // RuntimeError
  kOutOfRange = 11,        // IndexError
  kUnimplemented = 12,     // NotImplementedError
  kInternal = 13,          // RuntimeError
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

namespace internal {
// Prints "<what> of a StatusOr holding <status>" to stderr and aborts: reading the value of an
// error is a bug of the caller, and continuing would read an empty optional.
[[noreturn]] void DieOnValueOfError(const Status& status);
}  // namespace internal

// Holds a value or a non-OK Status. value() (and *, ->) on an error aborts the process with the
// status printed, as absl's does when exceptions are off: check ok() first, or use
// TXE_ASSIGN_OR_RETURN.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}                 // NOLINT: implicit like absl
  StatusOr(T&& value) : value_(std::move(value)) {}           // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {      // NOLINT
    if (status_.ok()) status_ = InternalError("StatusOr constructed from an OK Status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& { return Checked(); }
  T& value() & { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  const T& operator*() const& { return Checked(); }
  T& operator*() & { return Checked(); }
  const T* operator->() const { return &Checked(); }
  T* operator->() { return &Checked(); }

 private:
  const T& Checked() const {
    if (!value_.has_value()) internal::DieOnValueOfError(status_);
    return *value_;
  }
  T& Checked() {
    if (!value_.has_value()) internal::DieOnValueOfError(status_);
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace txe

#define TXE_STATUS_CONCAT_INNER_(a, b) a##b
#define TXE_STATUS_CONCAT_(a, b) TXE_STATUS_CONCAT_INNER_(a, b)

#define TXE_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::txe::Status txe_status_ = (expr);           \
    if (!txe_status_.ok()) return txe_status_;    \
  } while (0)

#define TXE_ASSIGN_OR_RETURN(lhs, expr) \
  TXE_ASSIGN_OR_RETURN_IMPL_(TXE_STATUS_CONCAT_(txe_statusor_, __LINE__), lhs, expr)
#define TXE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#endif  // TXE_CC_COMMON_STATUS_H_
