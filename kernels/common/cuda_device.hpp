// The attributes of the current CUDA device that the launchers and planners read, queried once
// per device (a launch then costs one cudaGetDevice and a map lookup).
#ifndef KRONLINALG_CUDA_DEVICE_HPP
#define KRONLINALG_CUDA_DEVICE_HPP

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

namespace kl {

// The device this thread's launches go to (the CUDA context current on it, whichever runtime or
// library made it current: torch, CuPy and this library agree through the driver), or -1.  A
// replay compares it with its arrays' device in a few ns, where asking torch costs ~0.5 us.
inline int current_device() {
  int dev = -1;
  return cudaGetDevice(&dev) == cudaSuccess ? dev : -1;
}

struct DeviceInfo {
  int id = 0, sms = 0, smem_optin = 0, smem_sm = 0, cc_major = 0, cc_minor = 0;
};

inline cudaError_t query_device(DeviceInfo *out) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  static std::mutex mu;
  static std::map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it == cache.end()) {
    DeviceInfo d;
    d.id = dev;
    if ((e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                    dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                    dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev)) !=
            cudaSuccess ||
        (e = cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev)) !=
            cudaSuccess)
      return e;
    it = cache.emplace(dev, d).first;
  }
  *out = it->second;
  return cudaSuccess;
}

// Opt a kernel into `smem` bytes of dynamic shared memory on the current device, once per
// (kernel, device, size): the driver call costs host time on every launch otherwise, which a
// tiny repeated product pays in full.
inline cudaError_t opt_in_smem(const void *func, int smem) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  static std::mutex mu;
  static std::map<std::tuple<const void *, int>, int> done;  // (kernel, device) -> bytes set
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(func, dev);
  auto it = done.find(key);
  if (it != done.end() && it->second >= smem) return cudaSuccess;
  e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess) done[key] = smem;
  return e;
}

// The blocks of `func` (threads, smem bytes of dynamic shared memory) an SM holds at once, times
// the SMs: a persistent grid's size.  Asked once per (kernel, device, threads, size); the
// occupancy query costs a launch's worth of host time otherwise.
inline cudaError_t resident_blocks(const void *func, int threads, int smem, int *out) {
  DeviceInfo d;
  cudaError_t e = query_device(&d);
  if (e != cudaSuccess) return e;
  static std::mutex mu;
  static std::map<std::tuple<const void *, int, int, int>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(func, d.id, threads, smem);
  auto it = cache.find(key);
  if (it == cache.end()) {
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, threads, size_t(smem));
    if (e != cudaSuccess) return e;
    it = cache.emplace(key, (per_sm > 0 ? per_sm : 1) * d.sms).first;
  }
  *out = it->second;
  return cudaSuccess;
}

}  // namespace kl

#endif
