// SPDX-License-Identifier: BSD-3-Clause
// Hopper (sm90) synchronisation wrappers for warp-specialized kernels: shared-memory mbarriers (phase-parity waits),
// named barriers between warpgroups, the generic-to-async proxy fence, and setmaxnreg register reconfiguration.
//
// Every barrier argument is a 32-bit shared-memory address (prim::smemAddress / __cvta_generic_to_shared).
// init, arrive and the cp.async arrival exist from sm80; what needs sm90 traps when a kernel that also compiles for
// older targets (the decode family's instances) reaches it there, which its planner never lets happen.
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

// One thread initialises; the barrier completes a phase after `arrivals` arrive operations.
__device__ __forceinline__ void mbarrierInit(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
}

// Makes initialised barriers visible to the other threads (and to the async proxy) before the CTA-wide sync that
// follows the initialisation.
__device__ __forceinline__ void fenceBarrierInit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Release-arrive: the caller's earlier shared-memory writes are visible to whoever observes the completed phase.
__device__ __forceinline__ void mbarrierArrive(uint32_t barrier) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(barrier)
      : "memory");
}

// One arrival that also announces the bytes the phase's copies (cp.async.bulk) will deliver.
__device__ __forceinline__ void mbarrierArriveExpectTx(uint32_t barrier, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
#endif
}

// True once the phase with the given parity has completed. A freshly initialised barrier is in phase 0, so waiting
// for parity 1 succeeds at once: producers start with parity 1 on their "slot empty" barriers.
__device__ __forceinline__ bool mbarrierTryWait(uint32_t barrier, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
  return true;
#else
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred complete;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
      "selp.u32 %0, 1, 0, complete;\n"
      "}\n"
      : "=r"(done)
      : "r"(barrier), "r"(parity)
      : "memory");
  return done != 0;
#endif
}

// Acquire-wait (try_wait suspends the thread for a while inside the instruction, so the loop does not spin hot).
__device__ __forceinline__ void mbarrierWait(uint32_t barrier, uint32_t parity) {
  while (!mbarrierTryWait(barrier, parity)) {
  }
}

// The same wait with its retry loop inside one asm block: the compiler sees no loop, so it keeps no registers free for
// one, which matters in kernels at the register limit (the sm90 d64 backward spilled with mbarrierWait's loop).
__device__ __forceinline__ void mbarrierWaitInline(uint32_t barrier, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile(
      "{\n"
      ".reg .pred complete;\n"
      "waitLoop:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 complete, [%0], %1;\n"
      "@!complete bra waitLoop;\n"
      "}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
#endif
}

// Arrives on the barrier once every cp.async this thread issued before has completed, without waiting for them.
// .noinc: the arrival counts against the barrier's expected arrivals (initialise with one per producing thread).
// cp.async writes are generic-proxy writes: a reader through the async proxy (wgmma) fences after its wait.
__device__ __forceinline__ void cpAsyncMbarrierArrive(uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

// Named barriers 1..15 (0 is __syncthreads). `threads` counts every participant, arriving or syncing; a multiple of 32.
__device__ __forceinline__ void namedBarrierSync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void namedBarrierArrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The same wait without .aligned: the threads of a warp need not reach it at one instruction, or converged (where
// warpgroups reach one barrier from different code the compiler cannot prove warp-uniform).
__device__ __forceinline__ void namedBarrierSyncUnaligned(uint32_t id, uint32_t threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Orders this thread's earlier generic-proxy shared-memory accesses (ordinary stores, completed cp.async copies)
// before later async-proxy accesses (wgmma operand reads, bulk copies) that a barrier hands over.
__device__ __forceinline__ void fenceProxyAsyncShared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Warpgroup-wide register reconfiguration (sm_90a): every warp of the warpgroup executes it. Takes effect only when
// the kernel has a register cap at entry (__launch_bounds__(threads, 1)).
template <int Registers>
__device__ __forceinline__ void setMaxRegistersIncrease() {
  static_assert(Registers % 8 == 0 && Registers >= 24 && Registers <= 256, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

template <int Registers>
__device__ __forceinline__ void setMaxRegistersDecrease() {
  static_assert(Registers % 8 == 0 && Registers >= 24 && Registers <= 256, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

}  // namespace flashattn::cuda::prim
