// SPDX-License-Identifier: BSD-3-Clause
// The HOST backend's worker pool. Work is cut into items whose outputs are disjoint and whose arithmetic does not
// depend on which thread runs them, so results are bitwise the same for any thread count.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace flashattn::host {

// A non-owning reference to a callable taking an item index: what parallelFor needs from its body, with no copy and
// no allocation (std::function may allocate for a lambda that captures more than two pointers).
class ItemBody {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ItemBody>>>
  ItemBody(F &&f)  // NOLINT: implicit, so that call sites pass a lambda as before
      : object_(const_cast<void *>(static_cast<const void *>(&f))),
        call_([](void *object, int64_t i) { (*static_cast<std::remove_reference_t<F> *>(object))(i); }) {}
  void operator()(int64_t i) const { call_(object_, i); }

 private:
  void *object_;
  void (*call_)(void *, int64_t);
};

// Runs body(i) for every i in [0, count) and returns when all are done. Safe to call from several threads at once
// (distinct handles may run concurrently); the calling thread works too. The first exception thrown by a body is
// rethrown here after every started item has finished. Allocates nothing once the pool has its threads.
void parallelFor(int64_t count, ItemBody body);

// Threads that take part in the next parallelFor: std::thread::hardware_concurrency, or the environment variable
// FLASHATTN_HOST_THREADS when it holds a positive number (read at every call, so a test can vary it in-process).
int threadsForNextCall();

}  // namespace flashattn::host
