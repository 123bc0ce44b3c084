// SPDX-License-Identifier: BSD-3-Clause
// The decode's per-CTA phase stamps, for the instrumented build that run.sh makes (instrument.patch puts the
// FA_PHASE_* marks into a copy of the shipped kernel): %globaltimer of thread 0 of each CTA at the kernel's component
// boundaries for the last kPhaseCalls launches, written at exit to the file named by $FLASHATTN_DECODE_PHASES.
// Every CTA of a launch reads the same call number: the last CTA to finish advances it, after all have read it.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace flashattn::cuda::decode::phases {

// $FLASHATTN_DECODE_PHASES at exit. Every CTA of a launch reads the same call number: the last CTA to finish advances
// it, after all have read it.
constexpr int kPhaseCalls = 320, kPhaseBlocks = 1024, kPhaseSlots = 16;
static __device__ unsigned long long gPhase[kPhaseCalls][kPhaseBlocks][kPhaseSlots];
static __device__ unsigned int gPhaseGrid[kPhaseCalls];
static __device__ unsigned int gPhaseCall, gPhaseDone;
__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Stamps stay in registers until the end (a store needs the call number, a global load whose wait would stall the
// phase being timed).
__device__ __forceinline__ void phaseStore(const unsigned long long (&stamps)[kPhaseSlots]) {
  const unsigned call = *static_cast<volatile unsigned *>(&gPhaseCall);
  if (blockIdx.x < kPhaseBlocks)
    for (int i = 0; i < kPhaseSlots; ++i)
      if (stamps[i]) gPhase[call % kPhaseCalls][blockIdx.x][i] = stamps[i];
}
__device__ __forceinline__ void phaseFinish(unsigned long long (&stamps)[kPhaseSlots]) {
  if (threadIdx.x != 0) return;
  stamps[6] = globalTimer();
  stamps[15] = clock64();
  phaseStore(stamps);
  const unsigned call = *static_cast<volatile unsigned *>(&gPhaseCall);
  if (blockIdx.x == 0) gPhaseGrid[call % kPhaseCalls] = gridDim.x;
  __threadfence();
  if (atomicAdd(&gPhaseDone, 1u) == gridDim.x - 1) {
    gPhaseDone = 0;
    __threadfence();
    atomicAdd(&gPhaseCall, 1u);
  }
}
static const char *gPhaseTag = "decode";
static bool gPhaseDumpRegistered = false;
static void dumpPhases() {
  const char *path = std::getenv("FLASHATTN_DECODE_PHASES");
  if (!path) return;
  static unsigned long long host[kPhaseCalls][kPhaseBlocks][kPhaseSlots];
  static unsigned grid[kPhaseCalls];
  unsigned calls = 0;
  if (cudaMemcpyFromSymbol(host, gPhase, sizeof host) != cudaSuccess ||
      cudaMemcpyFromSymbol(grid, gPhaseGrid, sizeof grid) != cudaSuccess ||
      cudaMemcpyFromSymbol(&calls, gPhaseCall, sizeof calls) != cudaSuccess)
    return;
  FILE *out = std::fopen(path, "a");
  if (!out) return;
  const unsigned first = calls > unsigned(kPhaseCalls) ? calls - kPhaseCalls : 0u;
  for (unsigned c = first; c < calls; ++c) {
    const unsigned slot = c % kPhaseCalls, blocks = grid[slot] < unsigned(kPhaseBlocks) ? grid[slot] : kPhaseBlocks;
    for (unsigned b = 0; b < blocks; ++b) {
      std::fprintf(out, "%s %u %u %u", gPhaseTag, c, grid[slot], b);
      for (int i = 0; i < kPhaseSlots; ++i) std::fprintf(out, " %llu", host[slot][b][i]);
      std::fprintf(out, "\n");
    }
  }
  std::fclose(out);
}
}  // namespace flashattn::cuda::decode::phases

// The kernels' hooks: stamps 0 start, 8 loader prepared (tensor maps: barriers set), 10 key range found, 1 loader
// started (tensor maps: ring issued), 2 first tile, 3 last tile, 4 epilogue, 5 cluster merge done / fused merge
// decided, 11 rows stored, 13 merged, 6 end, 7 (tiles << 32 | SM id); 14 and 15 the SM clock (clock64) at the start
// and the end. All are thread 0's view (analyze.py prints the slots it finds).
#define FA_PHASE_BEGIN()                                       \
  unsigned long long phaseStamps[phases::kPhaseSlots] = {}; \
  phaseStamps[0] = phases::globalTimer();                   \
  phaseStamps[14] = clock64()
#define FA_PHASE(slot) (phaseStamps[slot] = phases::globalTimer())
#define FA_PHASE_SM(tiles)                                                          \
  do {                                                                              \
    unsigned smid_;                                                                 \
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_));                             \
    phaseStamps[7] = (unsigned long long)(tiles) << 32 | smid_;                     \
    phaseStamps[10] = phases::globalTimer();                                        \
  } while (0)
#define FA_PHASE_END() phases::phaseFinish(phaseStamps)
