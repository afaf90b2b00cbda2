// kda::Status: the one error type of the library. Host-only, no GPU headers.
//
// Every launcher returns a Status; none throws, none aborts. A bad argument is reported before anything is
// enqueued. The message is a static string (no allocation), naming the argument and the problem.
#pragma once

namespace kda {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   // a null pointer, a bad size, a bad stride, an inconsistent table
  kUnsupported = 2,       // a valid request this build does not implement (head dim, dtype, chunk size)
  kWorkspaceTooSmall = 3, // the caller's workspace is smaller than workspace_size() asked for
  kRuntimeError = 4,      // the GPU runtime returned an error (launch failure, bad stream, ...)
};

class Status {
 public:
  constexpr Status() = default;
  constexpr Status(StatusCode code, const char* message) : code_(code), message_(message) {}

  static constexpr Status ok() { return Status(); }
  constexpr bool is_ok() const { return code_ == StatusCode::kOk; }
  constexpr explicit operator bool() const { return is_ok(); }
  constexpr StatusCode code() const { return code_; }
  // Never null; "ok" for success. Points at static storage (or a runtime's own static error string).
  constexpr const char* message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  const char* message_ = "ok";
};

constexpr Status invalid_argument(const char* message) { return Status(StatusCode::kInvalidArgument, message); }
constexpr Status unsupported(const char* message) { return Status(StatusCode::kUnsupported, message); }

constexpr const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kWorkspaceTooSmall: return "workspace too small";
    case StatusCode::kRuntimeError: return "runtime error";
  }
  return "unknown";
}

}  // namespace kda

// Returns from the enclosing function when `expr` (a kda::Status) is not ok.
#define KDA_RETURN_IF_ERROR(expr)           \
  do {                                      \
    const ::kda::Status kda_status_ = (expr); \
    if (!kda_status_.is_ok()) return kda_status_; \
  } while (0)

// Returns an invalid-argument Status with `message` from the enclosing function when `cond` is false.
#define KDA_REQUIRE(cond, message)                                      \
  do {                                                                  \
    if (!(cond)) return ::kda::invalid_argument(message);               \
  } while (0)
