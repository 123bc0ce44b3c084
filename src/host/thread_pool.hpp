// SPDX-License-Identifier: BSD-3-Clause
// The HOST backend's worker pool. Work is cut into items whose outputs are disjoint and whose arithmetic does not
// depend on which thread runs them, so results are bitwise the same for any thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace flashattn::host {

// Runs body(i) for every i in [0, count) and returns when all are done. Safe to call from several threads at once
// (distinct handles may run concurrently); the calling thread works too. The first exception thrown by a body is
// rethrown here after every started item has finished.
void parallelFor(int64_t count, const std::function<void(int64_t)> &body);

// Threads that take part in the next parallelFor: std::thread::hardware_concurrency, or the environment variable
// FLASHATTN_HOST_THREADS when it holds a positive number (read at every call, so a test can vary it in-process).
int threadsForNextCall();

}  // namespace flashattn::host
