// Status and Result: how every fallible call in engram-offload reports failure.
//
// No exception crosses the library boundary. A call returns `Status` (or `Result<T>`) carrying a
// category code, the raw errno or CUDA error number that caused it (0 when none), and a message that
// names the operation and its arguments ("mbind(len=512 MiB, node=1): EINVAL; Mems_allowed=0").
// `kUnsupported` means "this machine cannot do what was asked" (no GPU, one NUMA node, missing
// capability): callers report it as skipped/waived, never as success and never as a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "engram/export.hpp"

namespace engram {
ENGRAM_API_BEGIN

enum class Code : int {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed (bad preset, d % 32 != 0, bad file)
  kNotFound,         // a named thing does not exist (file, tensor, node)
  kUnsupported,      // the machine/kernel cannot do it; a skip, not a failure
  kPermission,       // EPERM/EACCES, seccomp, missing CAP_SYS_NICE
  kOutOfMemory,      // ENOMEM, cudaErrorMemoryAllocation
  kNoSpace,          // ENOSPC: tmpfs or hugepage pool too small
  kTimeout,          // a peer or step did not answer in time
  kIo,               // read/write failure, short file
  kCuda,             // any other CUDA runtime error
  kInternal,         // a bug in engram-offload
};

// Short lower-case name of a code ("invalid_argument"), stable for JSON output.
const char* code_name(Code code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message, int sys_error = 0)
      : code_(code), sys_error_(sys_error), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const noexcept { return code_ == Code::kOk; }
  explicit operator bool() const noexcept { return is_ok(); }
  Code code() const noexcept { return code_; }
  // The raw errno (or CUDA error number for kCuda) behind the failure; 0 when there is none.
  int sys_error() const noexcept { return sys_error_; }
  const std::string& message() const noexcept { return message_; }
  // "invalid_argument: <message>" (or "ok").
  std::string to_string() const;

  // Returns a copy whose message is "<context>: <message>".
  Status with_context(const std::string& context) const;

 private:
  Code code_ = Code::kOk;
  int sys_error_ = 0;
  std::string message_;
};

// Status built from an errno value: the code is derived from it (ENOMEM -> kOutOfMemory, ENOSPC ->
// kNoSpace, EPERM/EACCES -> kPermission, ENOENT -> kNotFound, EINVAL -> kInvalidArgument, ENOSYS/
// EOPNOTSUPP -> kUnsupported, else kIo) and the message gets ": <strerror name>" appended.
Status errno_status(int err, const std::string& what);

// Result<T>: a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).is_ok()) v_ = Status(Code::kInternal, "Result built from OK status");
  }

  bool is_ok() const noexcept { return std::holds_alternative<T>(v_); }
  explicit operator bool() const noexcept { return is_ok(); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

ENGRAM_API_END
}  // namespace engram

#define ENGRAM_CONCAT_INNER_(a, b) a##b
#define ENGRAM_CONCAT_(a, b) ENGRAM_CONCAT_INNER_(a, b)
// Propagate a non-OK Status from an expression returning Status.
#define ENGRAM_RETURN_IF_ERROR(expr)                                     \
  do {                                                                   \
    ::engram::Status ENGRAM_CONCAT_(engram_status_, __LINE__) = (expr);  \
    if (!ENGRAM_CONCAT_(engram_status_, __LINE__).is_ok())               \
      return ENGRAM_CONCAT_(engram_status_, __LINE__);                   \
  } while (0)

// `ENGRAM_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the Status.
// NOLINTBEGIN(bugprone-macro-parentheses): `tmp` is a name being declared and `lhs` a declaration
// ("auto x"); neither can be parenthesized.
#define ENGRAM_ASSIGN_OR_RETURN(lhs, expr) \
  ENGRAM_ASSIGN_OR_RETURN_IMPL_(ENGRAM_CONCAT_(engram_result_, __LINE__), lhs, expr)
#define ENGRAM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.is_ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
