#include "kronlinalg/status.h"

#include <string>

namespace {
thread_local std::string last_error = "no error";
}

namespace kl {
int fail(int code, const char *msg) {
  last_error = msg;
  return code;
}
}  // namespace kl

extern "C" const char *kl_last_error(void) { return last_error.c_str(); }
