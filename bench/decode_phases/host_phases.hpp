// SPDX-License-Identifier: BSD-3-Clause
// The instrumented build of run.sh only (instrument.patch puts the marks into a copy of the shipped source): host time of
// the steps of one API call, summed per step over the calls of the process and printed to stderr at exit. Elsewhere
// FLASHATTN_HOST_PHASE(n) is nothing.
#pragma once

#if defined(FLASHATTN_DECODE_PHASES)
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace flashattn::host_phases {

constexpr int kSteps = 10;
struct Totals {
  double ns[kSteps] = {};
  long long calls = 0;
  std::chrono::steady_clock::time_point last;
  ~Totals() {
    if (calls == 0) return;
    std::fprintf(stderr, "HOSTSTEPS %lld calls, ns per call by step:", calls);
    for (int i = 1; i < kSteps; ++i) std::fprintf(stderr, " %d:%.0f", i, ns[i] / double(calls));
    std::fprintf(stderr, "\n");
  }
};
inline Totals &totals() {
  static Totals t;
  return t;
}
// Step 0 starts a call; step n > 0 adds the time since the previous mark to step n.
inline void mark(int step) {
  Totals &t = totals();
  const auto now = std::chrono::steady_clock::now();
  if (step == 0) {
    ++t.calls;
  } else {
    t.ns[step] += std::chrono::duration<double, std::nano>(now - t.last).count();
  }
  t.last = std::chrono::steady_clock::now();
}

}  // namespace flashattn::host_phases

#define FLASHATTN_HOST_PHASE(step) ::flashattn::host_phases::mark(step)
#else
#define FLASHATTN_HOST_PHASE(step) ((void)0)
#endif
