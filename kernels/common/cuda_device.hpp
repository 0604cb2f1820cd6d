// The attributes of the current CUDA device that the launchers and planners read, queried once
// per device (a launch then costs one cudaGetDevice and a map lookup).
#ifndef KRONLINALG_CUDA_DEVICE_HPP
#define KRONLINALG_CUDA_DEVICE_HPP

#include <cuda_runtime.h>

#include <map>
#include <mutex>

namespace kl {

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

}  // namespace kl

#endif
