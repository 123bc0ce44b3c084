// SPDX-License-Identifier: BSD-3-Clause
// What the backward kernels receive (by value) and the tile configurations each instance compiles.
//
// The FlashAttention-2 backward runs three launches: a preprocess kernel (D = rowsum(dO * O), the LSE converted to
// base 2, per query row, in the workspace), the main kernel (one CTA per (key block, KV head, sequence) keeps its K/V
// block and the dK/dV accumulators on chip and walks the query blocks of every query head of its group; dQ is added
// in FP32 into the workspace) and a convert kernel (FP32 dQ -> storage type, strided).
//
// Built on the host by launchBackward from AttnProblem + AttnBuffers; plain data. In-sequence indices fit in 32 bits
// (planBackward rejects longer sequences); every address is formed in 64 bits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/plan.hpp"
#include "core/problem.hpp"
#include "cuda/family.hpp"

namespace flashattn::cuda::backward {

struct BackwardParams {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  const void *o = nullptr;
  const void *dO = nullptr;
  const float *lse = nullptr;
  void *dQ = nullptr;
  void *dK = nullptr;
  void *dV = nullptr;

  // Workspace: per query row (see rowIndex) the FP32 row sums D and LSE * log2(e) (+inf for rows with no visible key,
  // so their probabilities come out 0), the FP32 dQ accumulator [row][headDim], and in deterministic mode one
  // counter per (sequence, head, query block) that orders the dQ additions of the key blocks.
  float *rowDot = nullptr;
  float *lseLog2 = nullptr;
  float *dqAccum = nullptr;
  int32_t *dqTurn = nullptr;
  // dQ accumulator layout (backward_common.cuh's dqAccumIndex): row-major [row][headDim], or paneled: headDim / 64
  // panels of [dqRows][64] whose rows have their columns XOR-swizzled by 8 * (row % 4), so that the sm90 kernel's
  // 16-row warp tiles are contiguous (one bulk reduce-add each) and staged without shared-memory bank conflicts.
  bool dqPaneled = false;
  int64_t dqRows = 0;

  // Element strides (batch, head, row); ragged tensors have batch stride 0 and rows counted from cuSeqlens.
  int64_t qBatch = 0, qHead = 0, qRow = 0;
  int64_t kBatch = 0, kHead = 0, kRow = 0;
  int64_t vBatch = 0, vHead = 0, vRow = 0;
  int64_t oBatch = 0, oHead = 0, oRow = 0;
  int64_t dOBatch = 0, dOHead = 0, dORow = 0;
  int64_t dQBatch = 0, dQHead = 0, dQRow = 0;
  int64_t dKBatch = 0, dKHead = 0, dKRow = 0;
  int64_t dVBatch = 0, dVHead = 0, dVRow = 0;
  int64_t lseBatch = 0, lseHead = 0, lseRow = 0;

  int32_t batch = 0;
  int32_t heads = 0;
  int32_t kvHeads = 0;
  int32_t headsPerKvHead = 1;  // query head h reads KV head h / headsPerKvHead
  int32_t seqQ = 0;            // dense length, or the ragged bound maxSeqlenQ (clamps every sequence)
  int32_t seqK = 0;            // dense length (capacity: dK/dV rows written), or maxSeqlenK
  int32_t headDim = 0;         // of Q, K, dQ, dK: the problem's; the instance's D may be larger (zero-filled columns)
  int32_t headDimV = 0;        // of V, O, dO, dV, at most the instance's D as well
  int32_t dqPitch = 0;         // row length of the unpaneled FP32 dQ accumulator (dqPitchOf)
  int32_t keyBlocks = 0;       // ceil(seqK / BlockN): the fastest-varying part of the main kernel's 1-D grid
  int32_t queryBlocks = 0;     // ceil(seqQ / BlockM): counters per (sequence, head) in deterministic mode
  // The grid's order (backward_common.cuh decodeWorkItem): 1 walks the key blocks of one (sequence, KV head) group
  // after another; more takes the groups in sections of this many and the key blocks of a section's groups in turn,
  // so that under a mask, where key block 0 has the most work, the long CTAs of every group start early, while a
  // section's Q, dO and dQ accumulator still share the L2.
  int32_t groupsPerSection = 1;
  // Deterministic mode's turn order (backward_common.cuh turnOrderOf): false, the key blocks adding into one query
  // block go in ascending order, and the grid launches each group's key blocks ascending; true, both descending.
  bool descendingTurns = false;

  bool ragged = false;
  const int32_t *cuSeqlensQ = nullptr;
  const int32_t *cuSeqlensK = nullptr;
  int64_t totalQ = 0;
  int64_t totalK = 0;
  const int32_t *seqlensK = nullptr;

  float scale = 1.f;
  // What the convert multiplies the dQ accumulator by: the softmax scale where the main kernel leaves it out of dS
  // (BackwardConfig::dsUnscaled), else 1.
  float dqScale = 1.f;
  float softcap = 0.f;
  int32_t mask = 0;  // flashattn::Mask
  int64_t windowLeft = -1;
  int64_t windowRight = -1;
  const float *alibiSlopes = nullptr;
  int64_t alibiBatchStride = 0;
  // The sinks reach the main kernels through the LSE (which includes them); their gradient is one more kernel.
  const float *sinks = nullptr;
  float *dSinks = nullptr;
  float *sinkPartials = nullptr;  // dSinks: one partial sum per preprocess CTA, [heads][batch][rowBlocks]

  bool deterministic = false;
};

// One tile configuration of the tensor-core kernel: BlockM query rows x BlockN keys, Warps warps. The warps split
//   S^T = K Q^T and dP^T = V dO^T (BlockN x BlockM) as SdpWarpsN x (Warps / SdpWarpsN),
//   dV += P^T dO and dK += dS^T Q (BlockN x D) as DkvWarpsN x (Warps / DkvWarpsN),
//   dQ = dS K (BlockM x D) as DqWarpsM x (Warps / DqWarpsM).
// DoubleBuffer loads the next query block (Q, dO, D, LSE) while the current one computes. MinBlocks CTAs share an SM
// (registers capped at 65536 / (32 * Warps * MinBlocks) per thread): their barriers are independent, so one CTA's
// softmax, barriers and dQ additions hide behind another's tensor-core work.
struct MmaTile {
  int blockM;
  int blockN;
  int sdpWarpsN;
  int dkvWarpsN;
  int dqWarpsM;
  bool doubleBuffer;
  int minBlocks = 1;
  int warps = 8;
};

// The FP32 kernel and the preprocess/convert kernels run 8 warps.
constexpr int kBackwardWarps = 8;
constexpr int kBackwardThreads = kBackwardWarps * 32;

// Per instance head dim: the first tile that fits the device (mmaTileFits) is used (planBackward). The first entry
// is the one measured fastest on an H100/H200 (bf16 prefill sweep, and variants built outside the library); an A100
// (164 KB per SM) gets a later one where the first needs more; the last entry of each fits the 100 KB of sm86/sm89
// with one CTA.
constexpr int kMaxMmaTiles = 3;
struct MmaTileSet {
  int count;
  MmaTile tiles[kMaxMmaTiles];
};

// The unpaneled FP32 dQ accumulator's row length: the head dim rounded up to 8 floats, so the convert kernel's
// 16-byte reads of a row's last vector stay inside the row (8 bf16/fp16 or 4 fp32 elements a vector).
constexpr int32_t dqPitchOf(int64_t headDim) { return int32_t((headDim + 7) / 8 * 8); }

constexpr MmaTileSet mmaTilesFor(int headDim) {
  if (headDim <= 64) return MmaTileSet{1, {MmaTile{64, 64, 2, 2, 2, true, 2, 4}, MmaTile{}, MmaTile{}}};
  if (headDim <= 96)
    return MmaTileSet{2, {MmaTile{64, 128, 4, 4, 4, true}, MmaTile{64, 64, 4, 4, 4, true}, MmaTile{}}};
  if (headDim <= 128)
    return MmaTileSet{2, {MmaTile{64, 128, 4, 2, 2, true}, MmaTile{64, 64, 4, 4, 4, false}, MmaTile{}}};
  if (headDim <= 192)
    return MmaTileSet{2, {MmaTile{64, 64, 4, 2, 2, false}, MmaTile{32, 64, 4, 2, 2, false}, MmaTile{}}};
  return MmaTileSet{3, {MmaTile{64, 64, 4, 2, 2, true}, MmaTile{64, 64, 4, 2, 2, false}, MmaTile{32, 32, 2, 2, 2, false}}};
}

// Shared memory of a tensor-core tile (16-bit elements): K, V (BlockN x D), Q, dO (BlockM x D, twice when double
// buffered), P^T and dS^T (BlockN x BlockM), and the per-row D and LSE (FP32, once or twice).
constexpr std::size_t mmaSharedBytes(const MmaTile &t, int headDim) {
  const std::size_t stages = t.doubleBuffer ? 2 : 1;
  return (2 * std::size_t(t.blockN) * headDim + 2 * stages * std::size_t(t.blockM) * headDim +
          2 * std::size_t(t.blockN) * t.blockM) * 2 +
         2 * stages * std::size_t(t.blockM) * 4;
}

// Whether MinBlocks CTAs of the tile fit one SM of a device whose blocks may opt in to smemPerBlockOptin bytes. An SM
// holds the opt-in limit plus the 1 KB the hardware reserves per CTA (sm80: 163 + 1 KB, sm86/89: 99 + 1, sm90: 227 +
// 1); a tile meant to share the SM is skipped where it would run alone, since one CTA of it leaves the tensor cores idle
// through its barriers.
constexpr std::size_t kReservedSharedPerBlock = 1024;
constexpr bool mmaTileFits(const MmaTile &t, int headDim, std::size_t smemPerBlockOptin) {
  return std::size_t(t.minBlocks) * (mmaSharedBytes(t, headDim) + kReservedSharedPerBlock) <=
         smemPerBlockOptin + kReservedSharedPerBlock;
}

// The FP32 kernel (plain FFMA, FP32-level accuracy): BlockM x BlockN tiles, 256 threads, one configuration.
struct Fp32Tile {
  int blockM;
  int blockN;
};
constexpr Fp32Tile fp32TileFor(int headDim) { return headDim <= 128 ? Fp32Tile{32, 32} : Fp32Tile{16, 16}; }

// K, V (BlockN rows) and Q, dO (BlockM rows) padded by one float per row, P^T and dS^T (BlockN x (BlockM + 1)), the
// per-row D and LSE.
constexpr std::size_t fp32SharedBytes(int headDim) {
  const Fp32Tile t = fp32TileFor(headDim);
  return (2 * std::size_t(t.blockN + t.blockM) * (headDim + 1) + 2 * std::size_t(t.blockN) * (t.blockM + 1) +
          2 * std::size_t(t.blockM)) * 4;
}

// The workspace regions of every backward family (Plan::regions).
enum BackwardRegion : int { kRowDot = 0, kLseLog2 = 1, kSinkPartials = 2, kDqAccum = 3, kTurns = 4 };

// What every backward family shares once it has chosen its main kernel's block shape (config): the 16-byte row rule,
// the 32-bit and grid limits, the workspace regions and the description ("<kernelWords> sm90 bf16 d128 tile ...").
Verdict planBackwardCommon(const DeviceInfo &dev, const AttnProblem &p, const BackwardConfig &config,
                           const std::string &kernelWords, Plan *plan, std::string *whyNot);

// A window wider than both sequences is no window (-1): what the kernels see (makeParams), so that planners decide
// on the same windows; dropping it keeps the kernels' 64-bit window arithmetic far from overflow for huge values.
inline int64_t effectiveWindow(int64_t window, const AttnProblem &p) {
  return window >= p.seqQ + p.seqK ? -1 : window;
}

// Whether deterministic mode orders the dQ additions by descending key block (BackwardParams::descendingTurns): under
// a mask that bounds the query rows from below without a left window (backward.cu says why).
bool descendingTurnsPay(const AttnProblem &p);

// The grid's sections (BackwardParams::groupsPerSection) for every family: under a mask or in deterministic mode,
// key-block-major sections of L2-sized group sets; else 1 (backward.cu says why).
int32_t groupsPerSectionFor(const DeviceInfo &dev, const AttnProblem &p);

// The kernel arguments of a planned problem: buffers, strides, the workspace carved as the plan laid it out.
BackwardParams makeParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace);

// A family's main kernel for a planned problem: everything it needs is in the plan's config and the params.
using MainKernelLaunch = cudaError_t (*)(const DeviceInfo &dev, const Plan &plan, const BackwardParams &params,
                                         cudaStream_t stream);

// The launches of every backward family: zero dQ and the counters, preprocess, `main` (the family's main kernel),
// convert. A plain function pointer: the launch path allocates nothing.
cudaError_t launchBackwardPipeline(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan,
                                   const AttnBuffers &buf, void *workspace, cudaStream_t stream,
                                   MainKernelLaunch main);

// Defined once per (Element, instance head dim) by the generated instance files (backward_instance.cu.in):
// launches the main kernel with tile `tileIndex` (tensor-core instances) or the FP32 kernel (Element float).
template <typename Element, int HeadDim>
cudaError_t launchMainInstance(const BackwardParams &params, int tileIndex, cudaStream_t stream);

}  // namespace flashattn::cuda::backward
