// SPDX-License-Identifier: BSD-3-Clause
// Raising a kernel's dynamic shared-memory limit once per device, for the launch functions of the kernel families, and
// asking the runtime about a kernel on a given device (occupancy, cluster capacity) from a plan function.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace flashattn::cuda {

// cudaFuncSetAttribute is per (kernel, device) and not a stream operation (allowed during graph capture); doing it
// once per device keeps it off the launch path. `configuredDevices` must belong to this one kernel (kernels of one
// family often share a function type, so the caller keeps the flags next to the kernel: a static in the function
// that names it). Devices past 63 set it on every launch: merely slower. Up to 48 KB needs no opt-in.
template <typename Kernel>
cudaError_t ensureSharedLimit(Kernel kernel, std::size_t bytes, int device, std::atomic<uint64_t> &configuredDevices) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  const uint64_t bit = device >= 0 && device < 64 ? (uint64_t(1) << device) : 0;
  if (bit != 0 && (configuredDevices.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (err == cudaSuccess && bit != 0) configuredDevices.fetch_or(bit, std::memory_order_acq_rel);
  return err;
}

// Runs query() (returning a cudaError_t) with `device` current, switching to it and back; false when the runtime
// cannot answer, whose error is cleared so that the caller's next CUDA call does not inherit it.
template <typename Query>
bool askDevice(int device, Query &&query) {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  cudaError_t err = previous == device ? cudaSuccess : cudaSetDevice(device);
  if (err == cudaSuccess) {
    err = query();
    if (previous >= 0 && previous != device) cudaSetDevice(previous);
  }
  if (err != cudaSuccess) cudaGetLastError();
  return err == cudaSuccess;
}

}  // namespace flashattn::cuda
