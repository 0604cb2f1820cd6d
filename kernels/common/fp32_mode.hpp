// The float32 mode of one CUDA kernel family, process-wide: 0 = 3xTF32 on tensor cores (the
// default), 1 = IEEE FMAs on CUDA cores.  The first read takes the default from an environment
// variable (value "ffma": IEEE); the family's C entry point sets it afterwards.
#ifndef KRONLINALG_FP32_MODE_HPP
#define KRONLINALG_FP32_MODE_HPP

#include <atomic>
#include "knobs.hpp"

namespace kl {

class Fp32Mode {
 public:
  static constexpr int kTf32x3 = 0, kIeee = 1;

  explicit constexpr Fp32Mode(const char *env) : env_(env) {}

  int get() {
    int m = mode_.load(std::memory_order_relaxed);
    if (m < 0) {
      mode_.compare_exchange_strong(m, knob_is(env_, "ffma") ? kIeee : kTf32x3);
      m = mode_.load(std::memory_order_relaxed);
    }
    return m;
  }

  // Sets the mode when it is one of the two (anything else only queries); the previous mode.
  int set(int mode) {
    const int prev = get();
    if (mode == kTf32x3 || mode == kIeee) mode_.store(mode);
    return prev;
  }

 private:
  const char *env_;
  std::atomic<int> mode_{-1};
};

}  // namespace kl

#endif
