// SPDX-License-Identifier: BSD-3-Clause
// The split-KV decode's epilogue: the warps of one row tile combine their key groups through shared memory, and the
// CTA writes either O (one chunk) or the chunk's partial state; partial states are merged in chunk order, either by
// the last CTA of the (batch, KV head, row block) to finish (fused, counted in a self-resetting tagged word), by
// decodeMergeKernel, or (cluster merge) by the CTAs of a cluster of the unit's chunks reading each other's shared
// memory. The order never depends on timing, so the result is bitwise deterministic. Every combination of states is
// prim's merge (merge_state.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/kernels/decode/decode_work.cuh"
#include "cuda/primitives/cluster.cuh"
#include "cuda/primitives/gpu_flags.cuh"
#include "cuda/primitives/merge_state.cuh"
#include "cuda/primitives/primitives.cuh"

namespace flashattn::cuda::decode {

// O (4 columns from d) and LSE of query (head, token) of the CTA's batch.
template <typename Element>
__device__ __forceinline__ void storeOutput(const DecodeParams &p, int batch, int64_t head, int token, int d, float4 o,
                                            float lse) {
  Element *out = static_cast<Element *>(p.o) + int64_t(batch) * p.oBatch + head * p.oHead + int64_t(token) * p.oRow + d;
  prim::storeFloat4<Element>(out, o);
  if (p.lse && d == 0) p.lse[int64_t(batch) * p.lseBatch + head * p.lseHead + int64_t(token) * p.lseRow] = lse;
}

// The attention sink of the head (core/problem.hpp AttnProblem::sinks) joins a row's state once, where the row's O
// and LSE are finished; partial states never carry it.
template <typename Base>
__device__ __forceinline__ void addSink(const DecodeParams &p, int64_t head, prim::MergeState &state) {
  if (p.sinks != nullptr) state.addSink<Base>(__ldg(p.sinks + head) * prim::kLog2e);
}

// O row (4 columns from d) and LSE of one query row from the chunks' partial states (normalized O, and the state's max
// and sum apart), in chunk order, Batch chunks at a time: all of a batch's loads in flight, then one max and every
// chunk's weight at once (an online merge per chunk chained a compare, a branch and two exponentials per chunk: ~1 us
// of the fused merge at 16 chunks, NOTES.md). A chunk whose max is -inf saw no visible key and weighs nothing (the
// kernel wrote its O as zeros); a row no chunk saw gets O = 0 and LSE = -inf. The partial states were written by other CTAs of this or an earlier grid, so the loads
// bypass L1.
template <typename Element, int Batch>
__device__ __forceinline__ void mergeChunksOfRow(const DecodeParams &p, int batch, int64_t head, int token, int d) {
  // Chunk c's state is c * stateRows rows past chunk 0's: one stride per array, and loads past the last chunk read the
  // last chunk again (then count as empty), so the loads go out back to back with no branch between them.
  const int64_t stateRows = int64_t(p.batch) * p.heads * p.seqQ;
  const int64_t stateRow0 = (int64_t(batch) * p.heads + head) * p.seqQ + token;
  const float2 *stats0 = reinterpret_cast<const float2 *>(p.partialLse) + stateRow0;
  const float *o0 = p.partialO + stateRow0 * p.headDim + d;
  const int64_t oStride = stateRows * p.headDim;
  const int chunks = p.numChunks;
  prim::MergeState state;
  for (int c0 = 0; c0 < chunks; c0 += Batch) {
    float m[Batch], l[Batch];
    float4 v[Batch];
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      const int c = min(c0 + u, chunks - 1);
      const float2 stats = __ldcg(stats0 + c * stateRows);
      m[u] = stats.x;
      l[u] = stats.y;
      v[u] = __ldcg(reinterpret_cast<const float4 *>(o0 + c * oStride));
    }
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      if (c0 + u >= chunks) m[u] = prim::negInf(), l[u] = 0.f;
      // The stored O is normalized; the state's o is the unnormalized sum (0 for an empty chunk: l = 0, O = 0).
      v[u] = make_float4(v[u].x * l[u], v[u].y * l[u], v[u].z * l[u], v[u].w * l[u]);
    }
    prim::mergeStates<prim::Exp2>(state, m, l, v);
  }
  addSink<prim::Exp2>(p, head, state);
  float4 o;
  float lse;
  state.finish<prim::Exp2>(o, lse);
  storeOutput<Element>(p, batch, head, token, d, o, lse);
}

// The shared memory of the epilogue, over the K/V stages: per warp 16 rows of O (HeadDim + 4 floats, unnormalized)
// and (m, l) per row, then the cluster merge's (m, l) per row of the CTA's combined state.
template <int HeadDim, int Warps>
struct EpilogueScratch {
  static constexpr int kRow = HeadDim + 4;
  float *o;
  float *stats;
  float *clusterStats;

  __device__ __forceinline__ explicit EpilogueScratch(unsigned char *kvRegion)
      : o(reinterpret_cast<float *>(kvRegion)),
        stats(o + Warps * kRowsPerTile * kRow),
        clusterStats(stats + Warps * kRowsPerTile * 2) {}

  // The key groups' states of one row (local row `localRow`, columns d..d+3) combined: the largest max (log2 units),
  // the sum rescaled to it and O unnormalized. Every key group is read at once (Warps bounds them), so the chain per
  // row is one max, one exponential and one multiply-add deep rather than a loop's worth.
  __device__ __forceinline__ prim::MergeState combineKeyGroups(const DecodeParams &p, int localRow, int d) const {
    const int rowTiles = p.rowTilesPerCta;
    const int tile = localRow / kRowsPerTile;
    const int inTile = localRow - tile * kRowsPerTile;
    float m[Warps], l[Warps];
    float4 part[Warps];
#pragma unroll
    for (int kg = 0; kg < Warps; ++kg) {
      const int w = kg * rowTiles + tile;
      const bool used = kg < p.keyGroups;
      m[kg] = used ? stats[(w * kRowsPerTile + inTile) * 2] : prim::negInf();
      l[kg] = used ? stats[(w * kRowsPerTile + inTile) * 2 + 1] : 0.f;
      part[kg] = used ? *reinterpret_cast<const float4 *>(o + (w * kRowsPerTile + inTile) * kRow + d)
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    return prim::combineStates<prim::Exp2Fast>(m, l, part);
  }
};

// Step 2 of a cluster merge (sm90, the CTAs of a cluster are the unit's chunks, rank = chunk), after a cluster barrier
// that follows every CTA's own combined state: CTA `chunk` takes items chunk, chunk + numChunks, ... (`threads` items
// each) of the row block's (row, 4 columns) and merges the numChunks states in chunk order, all of a row's loads from
// the other CTAs' shared memory in flight at once, then adds the sink and stores O and the LSE. A CTA's state of local
// row r: (m in log2 units, l) at statsBase + 8 r, O unnormalized, columns d..d+3 at oAddress(r, d) (this CTA's shared
// addresses; the others' are the same offsets). Columns: the instance's V/O width; `columns`: the problem's.
template <typename Element, int Columns, typename OAddress>
__device__ __forceinline__ void mergeClusterRows(const DecodeParams &p, const DecodeWork &w, int columns,
                                                 uint32_t statsBase, OAddress &&oAddress, int tid, int threads) {
  constexpr int kQuads = Columns / 4;
  for (int item = w.chunk * threads + tid; item < w.rowsPerCta * kQuads; item += p.numChunks * threads) {
    const int localRow = item / kQuads;
    const int d = (item - localRow * kQuads) * 4;
    const int row = w.firstRow + localRow;
    if (row >= p.rows || d >= columns) continue;
    const uint32_t statsAt = statsBase + uint32_t(localRow * 2) * 4u;
    const uint32_t oAt = oAddress(localRow, d);
    float m[kMaxClusterChunks], l[kMaxClusterChunks];
    float4 part[kMaxClusterChunks];
#pragma unroll
    for (int c = 0; c < kMaxClusterChunks; ++c) {
      m[c] = prim::negInf(), l[c] = 0.f, part[c] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (c < p.numChunks) {
        const uint32_t rank = uint32_t(c);
        m[c] = prim::clusterLoad(prim::clusterAddress(statsAt, rank));
        l[c] = prim::clusterLoad(prim::clusterAddress(statsAt + 4u, rank));
        part[c] = prim::clusterLoad4(prim::clusterAddress(oAt, rank));
      }
    }
    const int groupHead = row / p.seqQ;
    const int token = row - groupHead * p.seqQ;
    const int64_t head = w.headOf(p, groupHead);
    prim::MergeState state = prim::combineStates<prim::Exp2>(m, l, part);
    addSink<prim::Exp2>(p, head, state);
    float4 o;
    float lse;
    state.finish<prim::Exp2>(o, lse);
    storeOutput<Element>(p, w.batch, head, token, d, o, lse);
  }
}

// Cluster merge of the split-KV decode. Step 1, in each CTA: its key groups' states combined per row, unnormalized,
// over the key group 0 slot of the row (each item reads and writes only its own 4 columns there) with (m, l) beside;
// then mergeClusterRows after a cluster barrier. The last barrier keeps each CTA's shared memory alive until the
// others have read it.
template <typename Element, int HeadDim, int Warps, int Threads>
__device__ __forceinline__ void clusterMerge(const DecodeParams &p, const DecodeWork &w,
                                             const EpilogueScratch<HeadDim, Warps> &scratch) {
  constexpr int kQuads = HeadDim / 4;
  constexpr int kRow = EpilogueScratch<HeadDim, Warps>::kRow;
  const int tid = int(threadIdx.x);
  for (int item = tid; item < w.rowsPerCta * kQuads; item += Threads) {
    const int localRow = item / kQuads;
    const int d = (item - localRow * kQuads) * 4;
    if (w.firstRow + localRow >= p.rows || d >= p.headDim) continue;
    const int tile = localRow / kRowsPerTile;
    const int inTile = localRow - tile * kRowsPerTile;
    const prim::MergeState s = scratch.combineKeyGroups(p, localRow, d);
    *reinterpret_cast<float4 *>(scratch.o + (tile * kRowsPerTile + inTile) * kRow + d) = s.o;
    if (d == 0) scratch.clusterStats[localRow * 2] = s.m, scratch.clusterStats[localRow * 2 + 1] = s.l;
  }
  prim::clusterSync();
  const uint32_t oBase = prim::smemAddress(scratch.o);
  mergeClusterRows<Element, HeadDim>(
      p, w, p.headDim, prim::smemAddress(scratch.clusterStats),
      [&](int localRow, int d) {
        const int tile = localRow / kRowsPerTile;
        const int inTile = localRow - tile * kRowsPerTile;
        return oBase + uint32_t((tile * kRowsPerTile + inTile) * kRow + d) * 4u;
      },
      tid, Threads);
  prim::clusterSync();
}

// Every row of the CTA, its key groups combined: O and LSE when the chunk is the whole range, else the chunk's
// partial state (normalized O and LSE) in the workspace.
template <typename Element, int HeadDim, int Warps, int Threads>
__device__ __forceinline__ void storeRows(const DecodeParams &p, const DecodeWork &w,
                                          const EpilogueScratch<HeadDim, Warps> &scratch) {
  constexpr int kQuads = HeadDim / 4;
  const bool direct = p.numChunks == 1;
  for (int item = int(threadIdx.x); item < w.rowsPerCta * kQuads; item += Threads) {
    const int localRow = item / kQuads;
    const int d = (item - localRow * kQuads) * 4;
    const int row = w.firstRow + localRow;
    if (row >= p.rows || d >= p.headDim) continue;
    float4 o;
    float lse;
    const int groupHead = row / p.seqQ;
    const int token = row - groupHead * p.seqQ;
    const int64_t head = w.headOf(p, groupHead);
    // Exp2Fast's reciprocal: the sum is >= 1, the largest key group's own (or the sink's).
    prim::MergeState state = scratch.combineKeyGroups(p, localRow, d);
    if (direct) addSink<prim::Exp2Fast>(p, head, state);
    state.template finish<prim::Exp2Fast>(o, lse);
    if (direct) {
      storeOutput<Element>(p, w.batch, head, token, d, o, lse);
    } else {
      const int64_t stateRow = ((int64_t(w.chunk) * p.batch + w.batch) * p.heads + head) * p.seqQ + token;
      *reinterpret_cast<float4 *>(p.partialO + stateRow * p.headDim + d) = o;
      // The chunk's max (base-2 logit units) and sum apart, not its LSE: an FP32 LSE of |logits| ~ 1e6 rounds log(sum)
      // away (steps of 0.06), and the chunks' weights with it; the merge forms max differences first, as one pass would.
      if (d == 0) *reinterpret_cast<float2 *>(p.partialLse + 2 * stateRow) = make_float2(state.m, state.l);
    }
  }
}

// Fused merge: whether this CTA is the unit's last to store its partial state, and so merges. Once every thread's
// partial state is stored, thread 0 counts the CTA in on the unit's tagged word with one release-acquire addition:
// the CTA that completes the count has every chunk's state visible, merges, and leaves the word at zero arrivals for
// the next launch (no memset, no compare-and-swap loop: a CAS count serialized 16 arrivals for several us, NOTES.md).
// A word without the tag held something else before this launch; every CTA of the unit sees the same high half, and
// the launch falls back to flags: each CTA raises its own, and after a sequentially consistent fence reads the unit's.
// Of two CTAs that both raise and then read, at least one sees the other's flag, so the last to fence sees them all;
// one finishing beside it may too, and both then merge, with the same loads in the same order, writing the same
// bytes. A merging CTA lowers the flags and tags the word. `decision`: a shared word the CTA may overwrite.
__device__ __forceinline__ bool lastToArrive(const DecodeParams &p, const DecodeWork &w, volatile int *decision) {
  const int tid = int(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  __syncthreads();
  enum : int { kSkip = 0, kMerge = 1, kUntagged = 2 };
  const int unit = (w.batch * p.kvHeads + w.kvHead) * p.rowBlocks + w.rowBlock;
  if (tid == 0) {
    const unsigned long long seen = prim::atomicAddAcqRelGpu(p.mergeCounts + unit, 1ull);
    int verdict = kUntagged;
    const uint32_t chunks = uint32_t(int(p.numChunks));
    if (uint32_t(seen >> 32) == kMergeTag && uint32_t(seen) < chunks) {
      const bool last = uint32_t(seen) + 1u == chunks;
      if (last) prim::storeRelaxedGpu(p.mergeCounts + unit, kMergeCountIdle);
      verdict = last ? kMerge : kSkip;
    }
    *decision = verdict;
  }
  __syncthreads();
  if (*decision == kUntagged) {
    __syncthreads();  // every thread has read the decision before warp 0 rewrites it
    if (warp == 0) {
      uint32_t *flags = p.mergeFlags + int64_t(unit) * p.numChunks;
      if (lane == 0) prim::storeReleaseGpu(flags + w.chunk, kMergeFlagRaised);
      __syncwarp();
      prim::fenceSeqCstGpu();
      bool allRaised = true;
      for (int c = lane; c < p.numChunks; c += 32)
        allRaised = allRaised && prim::loadRelaxedGpu(flags + c) == kMergeFlagRaised;
      allRaised = __all_sync(0xffffffffu, allRaised);
      if (allRaised) {
        prim::fenceAcquireGpu();
        for (int c = lane; c < p.numChunks; c += 32) prim::storeRelaxedGpu(flags + c, 0u);
        if (lane == 0) prim::storeRelaxedGpu(p.mergeCounts + unit, kMergeCountIdle);
      }
      if (lane == 0) *decision = allRaised ? kMerge : kSkip;
    }
    __syncthreads();
  }
  return *decision == kMerge;
}

// The merge of every chunk's state of the CTA's rows (the fused merge's last CTA).
template <typename Element, int HeadDim, int Threads>
__device__ __forceinline__ void mergeChunks(const DecodeParams &p, const DecodeWork &w) {
  constexpr int kQuads = HeadDim / 4;
  for (int item = int(threadIdx.x); item < w.rowsPerCta * kQuads; item += Threads) {
    const int localRow = item / kQuads;
    const int d = (item - localRow * kQuads) * 4;
    const int row = w.firstRow + localRow;
    if (row >= p.rows || d >= p.headDim) continue;
    const int groupHead = row / p.seqQ;
    const int token = row - groupHead * p.seqQ;
    mergeChunksOfRow<Element, 16>(p, w.batch, w.headOf(p, groupHead), token, d);
  }
}

}  // namespace flashattn::cuda::decode
