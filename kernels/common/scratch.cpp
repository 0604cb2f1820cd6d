#include "scratch.hpp"

#include <cstdlib>
#include <mutex>
#include <new>

namespace kl {
namespace {
std::mutex mu;
void *cached = nullptr;
size_t cached_bytes = 0;
bool borrowed = false;

void *alloc64(size_t bytes) {
  void *p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

ScratchLease::ScratchLease(size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu);
  if (borrowed) {
    ptr_ = alloc64(bytes);
    return;
  }
  if (cached_bytes < bytes) {
    std::free(cached);
    cached = nullptr;
    cached_bytes = 0;
    cached = alloc64(bytes);
    cached_bytes = bytes;
  }
  borrowed = shared_ = true;
  ptr_ = cached;
}

ScratchLease::~ScratchLease() {
  if (!ptr_) return;
  std::lock_guard<std::mutex> lock(mu);
  if (shared_)
    borrowed = false;
  else
    std::free(ptr_);
}

void release_scratch() {
  std::lock_guard<std::mutex> lock(mu);
  if (borrowed) return;
  std::free(cached);
  cached = nullptr;
  cached_bytes = 0;
}

}  // namespace kl
