// Errors as values. Library code never prints or exits: it returns an `Error` that says where
// (file, JSON pointer) and why, and callers add context as the error travels up.
//
//   Result<Plan> plan = load_plan("plan.json");
//   if (!plan) return plan.error().with_context("predict");
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace foresight {

class Error {
 public:
  Error() = default;
  explicit Error(std::string message) : message_(std::move(message)) {}

  const std::string& message() const { return message_; }

  // Prepends "context: " to the message, e.g. the file name in front of a pointer and reason.
  Error with_context(const std::string& context) const {
    return Error(context.empty() ? message_ : context + ": " + message_);
  }

 private:
  std::string message_;
};

// A value quoted for an error message: whole when short, else its start and end around the byte
// count, so that a 100 MB field never travels into a message whole.
//   quote_excerpt("2f2b") -> "\"2f2b\""
inline std::string quote_excerpt(std::string_view text, std::size_t max = 48) {
  std::string out(1, '"');
  if (text.size() <= max) {
    out.append(text);
  } else {
    out.append(text.substr(0, max / 2)).append("...");
    out.append(text.substr(text.size() - max / 4)).append("\" (").append(std::to_string(text.size()));
    return out.append(" bytes)");
  }
  return out.append(1, '"');
}

// Either a value or an Error; the minimal subset of std::expected (C++23) that we use.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : data_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<T>(data_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(data_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(data_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<Error>(data_);
  }

 private:
  std::variant<T, Error> data_;
};

// A Result without a value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  static Status Ok() { return Status(); }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace foresight

// Returns the error of `expr` (a Result or Status) from the enclosing function.
#define FS_RETURN_IF_ERROR(expr)                \
  do {                                          \
    auto&& fs_status_ = (expr);                 \
    if (!fs_status_) return fs_status_.error(); \
  } while (0)

#define FS_CONCAT_INNER_(a, b) a##b
#define FS_CONCAT_(a, b) FS_CONCAT_INNER_(a, b)
#define FS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp) return tmp.error();                   \
  lhs = std::move(tmp).value()

// `FS_ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its error.
#define FS_ASSIGN_OR_RETURN(lhs, expr) FS_ASSIGN_OR_RETURN_IMPL_(FS_CONCAT_(fs_result_, __LINE__), lhs, expr)
