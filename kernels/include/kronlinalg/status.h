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
  KL_ERR_ALLOC = 4       /* host allocation failed */
};

/* Message for the last non-OK status returned on this thread (never NULL). */
const char *kl_last_error(void);

#ifdef __cplusplus
}

namespace kl {
/* Records msg for kl_last_error() and returns code; kernels use it to fail loudly. */
int fail(int code, const char *msg);
}  // namespace kl
#endif

#endif
