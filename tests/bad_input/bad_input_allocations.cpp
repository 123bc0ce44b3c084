// SPDX-License-Identifier: BSD-3-Clause
// Counts heap allocations made through operator new, for the catalogue's check that HOST operations allocate
// nothing per call (docs/semantics.md, Workspace). Replacing the global operator new in the test executable also
// replaces it for libflashattn.so and libstdc++, whose calls bind to the executable's definition.
#include <atomic>
#include <cstdlib>
#include <new>

#include "bad_input_catalogue.hpp"

namespace fa_bad {
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_count{0};
}  // namespace

void startCountingAllocations() {
  g_count.store(0);
  g_counting.store(true);
}

long stopCountingAllocations() {
  g_counting.store(false);
  return g_count.load();
}
}  // namespace fa_bad

namespace {
void *allocate(std::size_t bytes) {
  if (fa_bad::g_counting.load(std::memory_order_relaxed)) fa_bad::g_count.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(bytes ? bytes : 1);
}
}  // namespace

void *operator new(std::size_t bytes) {
  if (void *p = allocate(bytes)) return p;
  throw std::bad_alloc();
}
void *operator new[](std::size_t bytes) {
  if (void *p = allocate(bytes)) return p;
  throw std::bad_alloc();
}
void *operator new(std::size_t bytes, const std::nothrow_t &) noexcept { return allocate(bytes); }
void *operator new[](std::size_t bytes, const std::nothrow_t &) noexcept { return allocate(bytes); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }
