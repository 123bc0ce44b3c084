// SPDX-License-Identifier: BSD-3-Clause
// Split-KV decode kernel: one CTA per (batch, KV head, KV chunk, row block), composed of
//   decode_work.cuh      which unit, chunk and keys the CTA serves;
//   decode_loader.cuh    how Q and the K/V tiles reach shared memory (cp.async, or tensor maps with a producer warp)
//                        and the stage pipeline that hands each tile on;
//   decode_math.cuh      Q K^T, the online softmax and P V of each warp's 16 rows (mma.sync, or FP32 FMAs);
//   decode_epilogue.cuh  the key groups' combine, the output or partial state, and the merge of the chunks (fused,
//                        cluster), all through prim's merge of softmax states (primitives/merge_state.cuh).
//
// Memory is the bound: every K/V byte of a chunk is read once into a ring of `Stages` shared-memory tiles. Keys outside
// the chunk or in a page whose id is out of range are marked absent (their scores become -inf) and their V rows never
// reach the output, so neither NaN in unused cache slots nor a bad block id can spread.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/kernels/decode/decode_epilogue.cuh"
#include "cuda/kernels/decode/decode_loader.cuh"
#include "cuda/kernels/decode/decode_math.cuh"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/kernels/decode/decode_work.cuh"
#include "cuda/ops.hpp"
#include "cuda/primitives/cluster.cuh"
#include "cuda/primitives/grid_dependency.cuh"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::decode {

template <typename Element, int HeadDim, int Warps, int TileKeys, int Stages, int LoaderKind>
__global__ void __launch_bounds__(ctaThreads(Warps, LoaderKind), Warps >= 8 ? 2 : 1)
    decodeKernel(const __grid_constant__ DecodeParams p) {
  constexpr int kThreads = ctaThreads(Warps, LoaderKind);
  constexpr int kRow = smemRowElements(int(sizeof(Element)), HeadDim);
  static_assert(HeadDim % 16 == 0 && TileKeys % 16 == 0 && TileKeys <= 64 && Stages >= 2, "tile shape");
  using KVLoader = LoaderOf<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>;
  using Math = RowSoftmax<Element, HeadDim, TileKeys, isTensorLoader(LoaderKind) ? TileKeys : 0>;

  // A separate merge kernel (a programmatic dependent) may be scheduled now; it still waits for this grid to finish.
  prim::launchDependents();

  extern __shared__ __align__(128) unsigned char smem[];
  // Every CTA has the same layout for a given launch; rowTilesPerCta only sizes the Q region.
  const SmemLayout layout =
      smemLayout(int(sizeof(Element)), HeadDim, Warps, TileKeys, Stages, LoaderKind, p.rowTilesPerCta);
  Element *qSmem = reinterpret_cast<Element *>(smem + layout.q);
  const KVLoader loader(smem, layout);
  loader.prepare(p);
  const DecodeWork w = findWork<TileKeys, LoaderKind == kLoaderPagedTensorMap>(p);
  loader.start(p, w);
  loadQ<Element, HeadDim, kThreads>(p, w, qSmem);

  // This warp's rows and key share: row tile warp % rowTiles, every keyGroups-th 16-key sub-tile from warp / rowTiles.
  const int warp = int(threadIdx.x) >> 5;
  const int lane = int(threadIdx.x) & 31;
  const int rowTile = warp % p.rowTilesPerCta;
  const int keyGroup = warp / p.rowTilesPerCta;
  const bool computes = warp < p.rowTilesPerCta * p.keyGroups;
  Math math;
  math.init(p, w, rowTile, lane, qSmem + rowTile * kRowsPerTile * kRow);
  float *pScratch = reinterpret_cast<float *>(smem + layout.pScratch) + warp * kRowsPerTile * 20;
  loader.run(
      p, w, [&] { math.loadQ(); },
      [&](int it, int slot, uint64_t present) {
        if (computes)
          math.consume(p, loader.kTile(slot), loader.vTile(slot), w.keyBegin + it * TileKeys, present, keyGroup, lane,
                       pScratch);
      });

  // Epilogue: each computing warp parks (m, l, O) of its 16 rows over the stages; the CTA combines the key groups.
  prim::cpAsyncWaitAll();
  __syncthreads();
  const EpilogueScratch<HeadDim, Warps> scratch(smem + layout.kv);
  if (computes)
    math.park(scratch.o + warp * kRowsPerTile * scratch.kRow, scratch.stats + warp * kRowsPerTile * 2, scratch.kRow,
              lane);
  __syncthreads();
  if (p.clusterMerge && p.numChunks > 1) {
    clusterMerge<Element, HeadDim, Warps, kThreads>(p, w, scratch);
    return;
  }
  storeRows<Element, HeadDim, Warps, kThreads>(p, w, scratch);
  if (p.numChunks == 1 || p.mergeCounts == nullptr) return;
  // The presence masks are no longer read: their first word holds the fused merge's decision.
  if (lastToArrive(p, w, reinterpret_cast<volatile int *>(smem + layout.validMask)))
    mergeChunks<Element, HeadDim, kThreads>(p, w);
}

// One kernel configuration: launch, shared-memory limit, and resident CTAs per SM.
template <typename Element, int HeadDim, int Warps, int TileKeys, int Stages, int LoaderKind>
struct DecodeKernel {
  static constexpr int kThreads = ctaThreads(Warps, LoaderKind);

  static std::size_t smemBytes(int rowTilesPerCta) {
    return smemLayout(int(sizeof(Element)), HeadDim, Warps, TileKeys, Stages, LoaderKind, rowTilesPerCta).total;
  }

  // Raises the dynamic shared-memory limit once per device to what the largest launch of this kernel needs (capped by
  // the device; the planner rejects what does not fit).
  static cudaError_t prepare(const DeviceInfo &dev) {
    static std::atomic<uint64_t> configuredDevices{0};
    const std::size_t largest = smemBytes(kMaxRowTilesPerCta);
    const std::size_t optin = std::size_t(dev.smemPerBlockOptin > 0 ? dev.smemPerBlockOptin : 0);
    return ensureSharedLimit(decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>,
                             largest < optin ? largest : optin, dev.device, configuredDevices);
  }

  // Clusters of more than 8 CTAs are a per-kernel opt-in (sm90); the planner caps the chunks at kMaxClusterChunks.
  static cudaError_t allowLargeClusters(int device) {
    static bool allowed[64] = {};
    if (device >= 0 && device < 64 && allowed[device]) return cudaSuccess;
    const cudaError_t err = cudaFuncSetAttribute(decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>,
                                                 cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err == cudaSuccess && device >= 0 && device < 64) allowed[device] = true;
    return err;
  }

  // A launch of `blocks` CTAs in clusters of clusterSize; `attribute` (one entry) holds the cluster shape.
  static cudaLaunchConfig_t clusterConfig(uint32_t blocks, int rowTilesPerCta, int clusterSize,
                                          cudaLaunchAttribute *attribute) {
    return prim::clusterLaunchConfig(blocks, kThreads, smemBytes(rowTilesPerCta), clusterSize, attribute);
  }

  static cudaError_t launch(const DecodeParams &params, const DeviceInfo &dev, cudaStream_t stream) {
    cudaError_t err = prepare(dev);
    if (err != cudaSuccess) return err;
    const int64_t blocks = int64_t(params.rowBlocks) * params.numChunks * params.kvHeads * params.batch;
    auto *kernel = decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>;
    if (params.clusterMerge && params.numChunks > 1) {
      if (params.numChunks > 8) {
        err = allowLargeClusters(dev.device);
        if (err != cudaSuccess) return err;
      }
      cudaLaunchAttribute attribute[1];
      cudaLaunchConfig_t config = clusterConfig(uint32_t(blocks), params.rowTilesPerCta, params.numChunks, attribute);
      config.stream = stream;
      err = cudaLaunchKernelEx(&config, kernel, params);
      if (err != cudaSuccess) return err;
      return cudaGetLastError();
    }
    kernel<<<dim3(uint32_t(blocks)), dim3(kThreads), smemBytes(params.rowTilesPerCta), stream>>>(params);
    return cudaGetLastError();
  }

  // Runs query() (a cudaError_t) on dev.device, switching to it and back, once the kernel's shared-memory limit is
  // raised; false when the runtime cannot answer (the error is cleared).
  template <typename Query>
  static bool askDevice(const DeviceInfo &dev, Query &&query) {
    return cuda::askDevice(dev.device, [&] {
      const cudaError_t err = prepare(dev);
      return err == cudaSuccess ? query() : err;
    });
  }

  // CTAs of rowTilesPerCta row tiles one SM holds at once (registers, threads and shared memory), asked once per device
  // and row tiling; 1 when the runtime cannot tell (the chunk choice then assumes one CTA per SM).
  static int occupancy(const DeviceInfo &dev, int rowTilesPerCta) {
    static int cache[64][kMaxRowTilesPerCta + 1] = {};
    const bool cacheable = dev.device >= 0 && dev.device < 64 && rowTilesPerCta >= 1 &&
                           rowTilesPerCta <= kMaxRowTilesPerCta;
    if (cacheable && cache[dev.device][rowTilesPerCta] > 0) return cache[dev.device][rowTilesPerCta];
    int blocks = 0;
    const bool asked = askDevice(dev, [&] {
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>, kThreads,
          smemBytes(rowTilesPerCta));
    });
    if (!asked) return 1;
    blocks = blocks > 0 ? blocks : 1;
    if (cacheable) cache[dev.device][rowTilesPerCta] = blocks;
    return blocks;
  }

  // Clusters of clusterSize CTAs resident at once (cudaOccupancyMaxActiveClusters), asked once per device, row tiling
  // and size. A 16-CTA cluster must fit in one GPC, and how many GPCs can take one differs between boards of the same
  // model (7 or 14 on the H200s measured, NOTES.md seventh pass); 0 when the runtime cannot tell.
  static int clusterCapacity(const DeviceInfo &dev, int rowTilesPerCta, int clusterSize) {
    static int cache[64][kMaxRowTilesPerCta + 1][kMaxClusterChunks + 1] = {};  // capacity + 1; 0 = not asked
    if (clusterSize < 1 || clusterSize > kMaxClusterChunks || rowTilesPerCta < 1 ||
        rowTilesPerCta > kMaxRowTilesPerCta)
      return 0;
    const bool cacheable = dev.device >= 0 && dev.device < 64;
    if (cacheable && cache[dev.device][rowTilesPerCta][clusterSize] > 0)
      return cache[dev.device][rowTilesPerCta][clusterSize] - 1;
    int clusters = 0;
    const bool asked = askDevice(dev, [&] {
      cudaError_t err = clusterSize > 8 ? allowLargeClusters(dev.device) : cudaSuccess;
      if (err != cudaSuccess) return err;
      cudaLaunchAttribute attribute[1];
      const cudaLaunchConfig_t config = clusterConfig(uint32_t(clusterSize), rowTilesPerCta, clusterSize, attribute);
      auto *kernel = decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>;
      return cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    });
    if (!asked) return 0;
    if (cacheable) cache[dev.device][rowTilesPerCta][clusterSize] = clusters + 1;
    return clusters;
  }
};

// The library's variant `Index` of an instance. Where the tensor loader cannot serve the instance (FP32, head dims
// that are not whole 64-column boxes) the planner never asks for it, and it stands for the portable variant; so does
// the two-stage variant where the instance does not compile it (twoStagesCompiled).
template <typename Element, int HeadDim, int Index>
constexpr Variant instanceVariant() {
  constexpr int elementBytes = int(sizeof(Element));
  if constexpr (isTensorLoader(libraryVariant(Index).loader) && !tensorLoadable(elementBytes, HeadDim))
    return libraryVariant(kLoaderCpAsync);
  else if constexpr (Index == kVariantTwoStages && !twoStagesCompiled(elementBytes, HeadDim))
    return libraryVariant(kLoaderCpAsync);
  else
    return libraryVariant(Index);
}

template <typename Element, int HeadDim, int Index>
using LibraryKernel =
    DecodeKernel<Element, HeadDim, instanceVariant<Element, HeadDim, Index>().warps,
                 resolvedTileKeys(instanceVariant<Element, HeadDim, Index>(), int(sizeof(Element)), HeadDim),
                 instanceVariant<Element, HeadDim, Index>().stages, instanceVariant<Element, HeadDim, Index>().loader>;

// f(LibraryKernel<Element, HeadDim, index>{}) for a library variant index, `otherwise` for any other: the one switch
// over the variants.
template <typename Element, int HeadDim, typename Result, typename F>
Result onLibraryKernel(int index, Result otherwise, F &&f) {
  static_assert(kLibraryVariantCount == 4, "one branch per library variant");
  switch (index) {
    case 0: return f(LibraryKernel<Element, HeadDim, 0>{});
    case 1: return f(LibraryKernel<Element, HeadDim, 1>{});
    case 2: return f(LibraryKernel<Element, HeadDim, 2>{});
    case 3: return f(LibraryKernel<Element, HeadDim, 3>{});
    default: return otherwise;
  }
}

template <typename Element, int HeadDim>
cudaError_t launchDecodeInstance(const DecodeParams &params, int libraryVariantIndex, const DeviceInfo &dev,
                                 cudaStream_t stream) {
  return onLibraryKernel<Element, HeadDim>(libraryVariantIndex, cudaErrorInvalidValue, [&](auto kernel) {
    return decltype(kernel)::launch(params, dev, stream);
  });
}

// 1 (one CTA per SM, as when the runtime cannot tell) and 0 clusters for an index that names no variant.
template <typename Element, int HeadDim>
int occupancyDecodeInstance(const DeviceInfo &dev, int libraryVariantIndex, int rowTilesPerCta) {
  return onLibraryKernel<Element, HeadDim>(libraryVariantIndex, 1, [&](auto kernel) {
    return decltype(kernel)::occupancy(dev, rowTilesPerCta);
  });
}

template <typename Element, int HeadDim>
int clusterCapacityDecodeInstance(const DeviceInfo &dev, int libraryVariantIndex, int rowTilesPerCta, int clusterSize) {
  return onLibraryKernel<Element, HeadDim>(libraryVariantIndex, 0, [&](auto kernel) {
    return decltype(kernel)::clusterCapacity(dev, rowTilesPerCta, clusterSize);
  });
}

}  // namespace flashattn::cuda::decode
