// Host scratch that outlives a call: intermediates of hundreds of MB would otherwise be
// page-faulted (and zeroed by the OS) afresh on every call, which costs more than the kernel.
#ifndef KRONLINALG_SCRATCH_HPP
#define KRONLINALG_SCRATCH_HPP

#include <cstddef>

namespace kl {

// Borrows the process-wide scratch buffer (grown as needed) for the lifetime of the lease; a
// concurrent caller that finds it borrowed gets a private allocation instead.
class ScratchLease {
 public:
  explicit ScratchLease(size_t bytes);
  ~ScratchLease();
  ScratchLease(const ScratchLease &) = delete;
  ScratchLease &operator=(const ScratchLease &) = delete;
  void *data() const { return ptr_; }

 private:
  void *ptr_ = nullptr;
  bool shared_ = false;
};

// Frees the cached buffer (e.g. after one huge call); safe while nothing holds a lease.
void release_scratch();

}  // namespace kl

#endif
