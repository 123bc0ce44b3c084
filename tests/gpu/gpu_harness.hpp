// Device-side helpers shared by the GPU tests: buffers with one cudaMalloc each (so compute-sanitizer sees every
// overrun), upload/download of HostTensors, NaN poisoning, and graph-capture replay.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensors.hpp"

namespace fa_test {

#define FA_CUDA_CHECK(expr)                                                                              \
  do {                                                                                                   \
    const cudaError_t fa_err_ = (expr);                                                                  \
    if (fa_err_ != cudaSuccess)                                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(fa_err_));                 \
  } while (0)

struct DeviceBuffer {
  void *ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) FA_CUDA_CHECK(cudaMalloc(&ptr, n));
  }
  DeviceBuffer(const void *host, size_t n) : DeviceBuffer(n) {
    if (n) FA_CUDA_CHECK(cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(const HostTensor &t) : DeviceBuffer(t.bytes.data(), t.bytes.size()) {}
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(DeviceBuffer &&o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; o.bytes = 0; }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  template <typename T = void>
  T *get() const { return static_cast<T *>(ptr); }
  // 0xFF bytes are NaN in FP16, BF16 and FP32: an element the kernel never writes fails the finiteness check.
  void poison() { if (bytes) FA_CUDA_CHECK(cudaMemset(ptr, 0xFF, bytes)); }
  void download(HostTensor &t) const { FA_CUDA_CHECK(cudaMemcpy(t.bytes.data(), ptr, t.bytes.size(), cudaMemcpyDeviceToHost)); }
  std::vector<uint8_t> raw() const {
    std::vector<uint8_t> out(bytes);
    if (bytes) FA_CUDA_CHECK(cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return out;
  }
};

// Captures `enqueue` (which must launch on `stream`) into a graph and replays it once.
template <typename F>
void captureAndReplay(cudaStream_t stream, F &&enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  FA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  FA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace fa_test
