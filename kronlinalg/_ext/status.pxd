# The kernels' status codes (kernels/include/kronlinalg/status.h) as Python exceptions, in one
# table for every extension: out of host memory a MemoryError naming what was asked for, a
# problem the kernel does not run a NotImplementedError (the planner asks before), anything
# else a RuntimeError carrying the kernel's message.
cdef extern from "kronlinalg/status.h" nogil:
    const char *kl_last_error()


cdef inline int check_status(int status) except -1:
    if status == 0:
        return 0
    msg = kl_last_error().decode()
    if status == 4:  # KL_ERR_ALLOC
        raise MemoryError(msg or "out of host memory")
    if status == 5:  # KL_ERR_UNSUPPORTED
        raise NotImplementedError(msg)
    raise RuntimeError(msg)
