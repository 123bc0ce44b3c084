// SPDX-License-Identifier: BSD-3-Clause
// The bad-input catalogue runs the same cases on a HOST handle (bad_input_host) and on a CUDA handle (bad_input_cuda).
// The only difference between the two is where buffers live; each executable's main() supplies that here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashattn/flashattn.h"

namespace fa_bad {

// Memory of the backend under test: host memory for HOST, device memory for CUDA.
class Memory {
 public:
  virtual ~Memory() = default;
  // 256-byte aligned (the workspace alignment the API asks for), so offsets from it are under the test's control.
  virtual void *allocate(std::size_t bytes) = 0;
  virtual void release(void *ptr) = 0;
  virtual void upload(void *dst, const void *src, std::size_t bytes) = 0;
  virtual void download(void *dst, const void *src, std::size_t bytes) = 0;
  virtual void fill(void *dst, uint8_t pattern, std::size_t bytes) = 0;
  // True when the caller's error state (CUDA's last error) is clean; a failed call must not leave one behind.
  virtual bool callerErrorStateClean() = 0;
  // Clears that state before a case, so a failure is pinned on the case that left it.
  virtual void clearCallerErrorState() = 0;
};

struct Target {
  flashAttnBackend_t backend;
  const char *name;
  Memory *memory;
};

// Called by main() before RUN_ALL_TESTS.
void setTarget(const Target &target);
// Prints how many cases each test checked and the total; returns the total.
int printCaseCount();

// Heap allocations through operator new, in every thread, between the two calls (bad_input_allocations.cpp).
void startCountingAllocations();
long stopCountingAllocations();

}  // namespace fa_bad
