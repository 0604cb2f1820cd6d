/* The small C ABI every kernel family shares: status codes and a thread-local message. */
#ifndef KRONLINALG_STATUS_H
#define KRONLINALG_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

enum kl_status {
  KL_OK = 0,
  KL_ERR_INVALID = 1,    /* bad shape/stride/argument reached the kernel layer */
  KL_ERR_NO_DEVICE = 2,  /* CUDA build, but no usable GPU at call time */
  KL_ERR_CUDA = 3,       /* a CUDA runtime call or launch failed */
  KL_ERR_ALLOC = 4,      /* host allocation failed */
  KL_ERR_UNSUPPORTED = 5 /* this kernel cannot run this problem (another algorithm must) */
};

/* Message for the last non-OK status returned on this thread (never NULL). */
const char *kl_last_error(void);

#ifdef __cplusplus
}

#include <cstddef>

namespace kl {
/* Records msg for kl_last_error() and returns code; kernels use it to fail loudly. */
int fail(int code, const char *msg);

/* Out of host memory, told in bytes.  A kernel notes each large host allocation before making
   it (note_alloc: its size and what it is for, on the calling thread); when std::bad_alloc
   reaches the entry point, fail_alloc(op) returns KL_ERR_ALLOC with the message
   "<op>: out of host memory: asked for N bytes (<what>)", which the extension modules raise as
   MemoryError.  Allocations inside an OpenMP region must not throw out of it: catch there,
   then note_alloc on the calling thread after the region and throw std::bad_alloc. */
void note_alloc(size_t bytes, const char *what);
int fail_alloc(const char *op);
}  // namespace kl
#endif

#endif
