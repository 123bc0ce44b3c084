// SPDX-License-Identifier: BSD-3-Clause
// The bad-input catalogue on a CUDA handle: buffers in device memory, one cudaMalloc each. Exits 77 (skipped) when
// there is no usable GPU, like every GPU test (tests/gpu/gpu_main.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "bad_input_catalogue.hpp"

namespace {

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

class DeviceMemory final : public fa_bad::Memory {
 public:
  void *allocate(std::size_t bytes) override {
    void *p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");  // 256-byte aligned
    return p;
  }
  void release(void *ptr) override { cudaFree(ptr); }
  void upload(void *dst, const void *src, std::size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  // Synchronous on the legacy default stream, so anything a call wrongly queued has finished before the compare.
  void download(void *dst, const void *src, std::size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
  void fill(void *dst, uint8_t pattern, std::size_t bytes) override {
    check(cudaMemset(dst, pattern, bytes), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  bool callerErrorStateClean() override { return cudaPeekAtLastError() == cudaSuccess; }
  void clearCallerErrorState() override { cudaGetLastError(); }
};

}  // namespace

int main(int argc, char **argv) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  DeviceMemory memory;
  fa_bad::setTarget({FLASHATTN_BACKEND_CUDA, "CUDA", &memory});
  const int result = RUN_ALL_TESTS();
  fa_bad::printCaseCount();
  return result;
}
