#include "kronlinalg/status.h"

#include <string>

namespace {
thread_local std::string last_error = "no error";
thread_local size_t alloc_bytes = 0;
thread_local const char *alloc_what = "";
}  // namespace

namespace kl {
int fail(int code, const char *msg) {
  last_error = msg;
  return code;
}

void note_alloc(size_t bytes, const char *what) {
  alloc_bytes = bytes;
  alloc_what = what;
}

int fail_alloc(const char *op) {
  try {
    last_error = std::string(op) + ": out of host memory: asked for " + std::to_string(alloc_bytes) +
                 " bytes (" + alloc_what + ")";
  } catch (...) {  // no memory even for the message
    last_error.clear();
  }
  return KL_ERR_ALLOC;
}
}  // namespace kl

extern "C" const char *kl_last_error(void) { return last_error.c_str(); }
