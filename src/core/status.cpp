// Status helpers: code names and errno classification (see include/engram/status.hpp).
#include "engram/status.hpp"

#include <cerrno>
#include <cstring>

namespace engram {

const char* code_name(Code code) noexcept {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kNotFound: return "not_found";
    case Code::kUnsupported: return "unsupported";
    case Code::kPermission: return "permission";
    case Code::kOutOfMemory: return "out_of_memory";
    case Code::kNoSpace: return "no_space";
    case Code::kTimeout: return "timeout";
    case Code::kIo: return "io";
    case Code::kCuda: return "cuda";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_, sys_error_);
}

Status errno_status(int err, const std::string& what) {
  Code code = Code::kIo;
  switch (err) {
    case ENOMEM: code = Code::kOutOfMemory; break;
    case ENOSPC: code = Code::kNoSpace; break;
    case EPERM:
    case EACCES: code = Code::kPermission; break;
    case ENOENT: code = Code::kNotFound; break;
    case EINVAL: code = Code::kInvalidArgument; break;
    case ENOSYS:
    case EOPNOTSUPP: code = Code::kUnsupported; break;
    case ETIMEDOUT: code = Code::kTimeout; break;
    default: break;
  }
  const char* name = strerrorname_np(err);
  return Status(code, what + ": " + (name ? name : "errno " + std::to_string(err)) + " (" +
                          std::strerror(err) + ")",
                err);
}

}  // namespace engram
