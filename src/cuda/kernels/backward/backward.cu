// SPDX-License-Identifier: BSD-3-Clause
// The portable backward families (src/cuda/family.hpp): cuda.bwd.mma_sync (FP16/BF16) and cuda.bwd.ffma (FP32), and
// the pipeline every backward family shares (backward_params.hpp: planBackwardCommon, launchBackwardPipeline; the
// sm_90a wgmma family of backward_sm90/ brings only its main kernel). This file also holds the two small kernels around
// the main one:
//   preprocess: per query row D = rowsum(dO * O) and LSE * log2 e (+inf for a row with no visible key), FP32;
//   convert:    FP32 dQ accumulator (times dqScale: the softmax scale where the main kernel left it out of dS) -> dQ
//               in the storage type and the caller's strides.
//
// Workspace regions (BackwardRegion): D per row, LSE * log2 e per row, FP32 dQ [row][headDim], and in deterministic
// mode one int32 turn counter per (sequence, head, query block). Rows are indexed by workspaceRow(): dense
// [batch][heads][seqQ], ragged [heads][totalQ]. dQ and the counters are zeroed by one memset per call.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "cuda/family.hpp"
#include "cuda/generated/backward_instance_list.hpp"
#include "cuda/instances.hpp"
#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/primitives/math.cuh"
#include "cuda/vector_rule.hpp"

namespace flashattn::cuda {
namespace backward {
namespace {

constexpr int kRowsPerSmallBlock = 64;  // preprocess and convert: query rows per CTA (8 warps)

const InstanceList &kBackwardInstances = generated::kBackwardInstances;

// ---- preprocess and convert ----------------------------------------------------------------------------------------

// 16 bytes of storage as floats.
template <typename Element>
struct Vec16 {
  static constexpr int kCount = 16 / sizeof(Element);
};

// The first `count` elements at src as floats, the rest of the vector zeros: a row's last vector where the head dim
// is not a whole number of 16-byte vectors (nothing past the row is read).
template <typename Element>
__device__ __forceinline__ void loadFloats(const Element *src, float (&out)[Vec16<Element>::kCount], int count) {
  if (count < Vec16<Element>::kCount) {
#pragma unroll
    for (int e = 0; e < Vec16<Element>::kCount; ++e) out[e] = e < count ? prim::toFloat(src[e]) : 0.f;
    return;
  }
  const uint4 raw = *reinterpret_cast<const uint4 *>(src);
  if constexpr (std::is_same_v<Element, float>) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  } else {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = prim::unpackFloat2<Element>(words[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
}

// The first `count` of them (all: one 16-byte store).
template <typename Element>
__device__ __forceinline__ void storeFloats(Element *dst, const float (&in)[Vec16<Element>::kCount], int count) {
  if (count < Vec16<Element>::kCount) {
#pragma unroll
    for (int e = 0; e < Vec16<Element>::kCount; ++e)
      if (e < count) dst[e] = prim::fromFloat<Element>(in[e]);
    return;
  }
  uint4 raw;
  if constexpr (std::is_same_v<Element, float>) {
    raw = make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]), __float_as_uint(in[3]));
  } else {
    raw = make_uint4(prim::packFloat2<Element>(in[0], in[1]), prim::packFloat2<Element>(in[2], in[3]),
                     prim::packFloat2<Element>(in[4], in[5]), prim::packFloat2<Element>(in[6], in[7]));
  }
  *reinterpret_cast<uint4 *>(dst) = raw;
}

struct RowBlockItem {
  int32_t rowBlock;
  int32_t head;
  int32_t batch;
};

__device__ __forceinline__ RowBlockItem decodeRowBlock(int32_t rowBlocks, int32_t heads) {
  const int64_t linear = blockIdx.x;
  RowBlockItem r;
  r.rowBlock = int32_t(linear % rowBlocks);
  const int64_t rest = linear / rowBlocks;
  r.head = int32_t(rest % heads);
  r.batch = int32_t(rest / heads);
  return r;
}

// The sinks' gradient, dSinks[h] = -sum over head h's rows of exp(s_h - LSE_i) D_i (the sink's column has no value:
// dP = 0, dS = -P D), in two fixed-order passes so that it is bitwise deterministic: each preprocess CTA sums its rows
// (warp by warp, row by row) into one partial, and one convert CTA per head sums the head's partials.
__device__ __forceinline__ void storeSinkPartial(const BackwardParams &p, const RowBlockItem &item, int32_t rowBlocks,
                                                 float warpSum) {
  __shared__ float perWarp[kBackwardWarps];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (lane == 0) perWarp[warp] = warpSum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int w = 0; w < kBackwardWarps; ++w) sum += perWarp[w];
    p.sinkPartials[(int64_t(item.head) * p.batch + item.batch) * rowBlocks + item.rowBlock] = sum;
  }
}

__device__ __forceinline__ void storeSinkGradient(const BackwardParams &p, int32_t head, int32_t rowBlocks) {
  __shared__ double partial[kBackwardThreads];
  const int64_t count = int64_t(p.batch) * rowBlocks;
  const float *partials = p.sinkPartials + int64_t(head) * count;
  double acc = 0.0;
  for (int64_t x = threadIdx.x; x < count; x += kBackwardThreads) acc += double(partials[x]);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kBackwardThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.dSinks[head] = float(-partial[0]);
}

// One warp per row: D = sum over the head dim of dO * O (FP32), and the LSE in base 2.
template <typename Element>
__global__ void __launch_bounds__(kBackwardThreads) preprocessKernel(const __grid_constant__ BackwardParams p,
                                                                     int32_t rowBlocks) {
  constexpr int kVec = Vec16<Element>::kCount;
  const RowBlockItem item = decodeRowBlock(rowBlocks, p.heads);
  const SequenceExtent seq = sequenceExtent(p, item.batch);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  constexpr int kRowsPerWarp = kRowsPerSmallBlock / kBackwardWarps;
  const Element *oHead = static_cast<const Element *>(p.o) + int64_t(item.batch) * p.oBatch +
                         int64_t(item.head) * p.oHead + seq.qStart * p.oRow;
  const Element *dOHead = static_cast<const Element *>(p.dO) + int64_t(item.batch) * p.dOBatch +
                          int64_t(item.head) * p.dOHead + seq.qStart * p.dORow;
  const float sinkLog2 = p.dSinks ? p.sinks[item.head] * prim::kLog2e : 0.f;
  float sinkSum = 0.f;  // lane 0: this warp's rows' exp(s - LSE) D, in row order
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int32_t i = item.rowBlock * kRowsPerSmallBlock + warp * kRowsPerWarp + r;
    if (i >= seq.seqQ) break;
    const Element *oRow = oHead + int64_t(i) * p.oRow;
    const Element *dORow = dOHead + int64_t(i) * p.dORow;
    float acc = 0.f;
    for (int c = lane * kVec; c < p.headDimV; c += 32 * kVec) {
      float o[kVec], g[kVec];
      loadFloats<Element>(oRow + c, o, p.headDimV - c);
      loadFloats<Element>(dORow + c, g, p.headDimV - c);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc = fmaf(o[e], g[e], acc);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) {
      const int64_t row = workspaceRow(p, item.batch, item.head, seq, i);
      const float lse =
          p.lse[int64_t(item.batch) * p.lseBatch + int64_t(item.head) * p.lseHead + (seq.qStart + i) * p.lseRow];
      p.rowDot[row] = acc;
      const float lseLog2 = lse == -INFINITY ? INFINITY : lse * prim::kLog2e;
      p.lseLog2[row] = lseLog2;
      if (p.dSinks) sinkSum += exp2f(sinkLog2 - lseLog2) * acc;
    }
  }
  if (p.dSinks) storeSinkPartial(p, item, rowBlocks, sinkSum);
}

template <typename Element>
__global__ void __launch_bounds__(kBackwardThreads) convertKernel(const __grid_constant__ BackwardParams p,
                                                                  int32_t rowBlocks) {
  constexpr int kVec = Vec16<Element>::kCount;
  const RowBlockItem item = decodeRowBlock(rowBlocks, p.heads);
  if (p.dSinks && item.batch == 0 && item.rowBlock == 0) storeSinkGradient(p, item.head, rowBlocks);
  const SequenceExtent seq = sequenceExtent(p, item.batch);
  const int vectorsPerRow = (p.headDim + kVec - 1) / kVec;
  Element *dQHead = static_cast<Element *>(p.dQ) + int64_t(item.batch) * p.dQBatch + int64_t(item.head) * p.dQHead +
                    seq.qStart * p.dQRow;
  for (int idx = int(threadIdx.x); idx < kRowsPerSmallBlock * vectorsPerRow; idx += kBackwardThreads) {
    const int32_t i = item.rowBlock * kRowsPerSmallBlock + idx / vectorsPerRow;
    const int c = (idx % vectorsPerRow) * kVec;
    if (i >= seq.seqQ) break;  // idx grows with i: every later index is past the sequence too
    const float *src = p.dqAccum + dqAccumIndex(p, workspaceRow(p, item.batch, item.head, seq, i), c);
    float values[kVec];
#pragma unroll
    for (int e = 0; e < kVec; e += 4) {
      const float4 f = *reinterpret_cast<const float4 *>(src + e);
      values[e] = f.x * p.dqScale;
      values[e + 1] = f.y * p.dqScale;
      values[e + 2] = f.z * p.dqScale;
      values[e + 3] = f.w * p.dqScale;
    }
    storeFloats<Element>(dQHead + int64_t(i) * p.dQRow + c, values, p.headDim - c);
  }
}

template <typename Element>
cudaError_t launchSmallKernels(const BackwardParams &params, int32_t rowBlocks, bool preprocess,
                               cudaStream_t stream) {
  const int64_t blocks = int64_t(rowBlocks) * params.heads * params.batch;
  if (blocks == 0) return cudaSuccess;
  void *args[] = {const_cast<BackwardParams *>(&params), &rowBlocks};
  const void *kernel = preprocess ? reinterpret_cast<const void *>(&preprocessKernel<Element>)
                                  : reinterpret_cast<const void *>(&convertKernel<Element>);
  return cudaLaunchKernel(kernel, dim3(unsigned(blocks)), dim3(kBackwardThreads), args, 0, stream);
}

cudaError_t launchMain(InstanceKey key, const BackwardParams &params, int tileIndex, cudaStream_t stream) {
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV) \
  if (key.dtype == DType::DT && key.headDim == HD) return launchMainInstance<CT, HD>(params, tileIndex, stream);
#include "cuda/generated/backward_instances.inc"
#undef FLASHATTN_INSTANCE
  return cudaErrorInvalidValue;  // unreachable: plans name instances of the same list
}

cudaError_t launchSmall(DType t, const BackwardParams &params, int32_t rowBlocks, bool preprocess,
                        cudaStream_t stream) {
  switch (t) {
    case DType::FP16: return launchSmallKernels<__half>(params, rowBlocks, preprocess, stream);
    case DType::BF16: return launchSmallKernels<__nv_bfloat16>(params, rowBlocks, preprocess, stream);
    case DType::FP32: return launchSmallKernels<float>(params, rowBlocks, preprocess, stream);
  }
  return cudaErrorInvalidValue;
}

// Query rows of the workspace (workspaceRow's range): dense [batch][heads][seqQ], ragged [heads][totalQ].
int64_t workspaceRows(const AttnProblem &p) {
  return p.ragged ? int64_t(p.heads) * p.totalQ : p.batch * p.heads * p.seqQ;
}

}  // namespace
}  // namespace backward

namespace backward {

// Deterministic mode's turn order (backward_common.cuh turnOrderOf), for every family. Under a mask that bounds the
// query rows from below (causal, a right window) and not from above (no left window), every key block sees the query
// blocks up to the last one, and key block n + 1's range starts at or after key block n's, a block higher wherever
// the mask rather than the sequence's first row bounds it. Walking ascending from that start, key block n + 1 then
// reaches each block a step before key block n, so with the additions ordered by descending key block a CTA finds
// its turn already passed instead of trailing its predecessor by one hand-over per link of the chain. The price: the
// grid launches the short (high) key blocks first, so the last CTAs of the grid are the long ones. Measured on the
// wgmma family (H200, causal, bf16): D192, D256 and MLA's 192/128 gain 4-27%; D128 and D64, whose kernels already
// hide the chain (the d128 form's dQ warps), gain nothing and lose 1-2%; with GQA (D128 32/8, D192 32/8, D256 16/8
// and 16/4) it loses 8-24%. The tail of long CTAs explains only 4-13% of that (a list-scheduling simulation); the
// likelier cost is the L2: with the group's query heads walked per block, key block n reaches a block heads * blockN
// / blockM steps after key block n + 1, and the wave moves 46-67 MB through the L2 in between at GQA 4 (12-17 MB
// without GQA), where the ascending order's CTAs visit each block together. So the descending order takes head dims
// above 128 with one query head per KV head. Elsewhere (no mask: all ranges equal; a left window, where the
// descending walk of the wgmma kernels gives the ascending order that step) the ascending order stays. The windows
// are the kernels' (effectiveWindow).
bool descendingTurnsPay(const AttnProblem &p) {
  const int64_t left = effectiveWindow(p.windowLeft, p);
  const int64_t right = effectiveWindow(p.windowRight, p);
  return p.deterministic && p.headDim > 128 && p.heads == p.kvHeads && left < 0 &&
         (p.mask != Mask::None || right >= 0);
}

// The grid's sections. Under a causal mask key block 0 has the most work, and walking one (sequence, KV head) group's
// key blocks after another starts the last groups' long CTAs late (a simulation of the CTA scheduler: 6-15% over the
// ideal at S 2k-8k); key-block-major order starts every long CTA first (but with deterministic mode's descending
// turns, descendingTurnsPay, last in a section). Sections of groups keep what their CTAs read in the L2: as
// FlashAttention-3's backward LPT scheduler, at most 40 MB (four fifths of a smaller L2) of Q, dO and FP32 dQ
// accumulator per section, a power of two of groups. Deterministic mode takes sections without a mask too: a
// wave then holds shorter runs of one group's key blocks, so fewer CTAs start behind the same chain of turns.
int32_t groupsPerSectionFor(const DeviceInfo &dev, const AttnProblem &p) {
  if (p.mask == Mask::None && !p.deterministic) return 1;
  const int64_t groups = p.batch * p.kvHeads;
  const int64_t bytesPerGroup =
      (p.heads / p.kvHeads) * p.seqQ * ((p.headDim + p.headDimV) * int64_t(dtypeSize(p.dtype)) + p.headDim * 4);
  int64_t sectionBytes = int64_t(40) << 20;
  if (dev.l2Bytes > 0) sectionBytes = std::min<int64_t>(sectionBytes, int64_t(dev.l2Bytes) / 5 * 4);
  int64_t section = 1;
  while (2 * section <= groups && 2 * section * bytesPerGroup <= sectionBytes) section *= 2;
  return int32_t(section);
}

Verdict planBackwardCommon(const DeviceInfo &dev, const AttnProblem &p, const BackwardConfig &config,
                           const std::string &kernelWords, Plan *plan, std::string *whyNot) {
  auto refuse = [&](const std::string &reason) {
    *whyNot = reason;
    return Verdict::Refused;
  };
  const bool batchUsed = !p.ragged && p.batch > 1;
  if (!vectorStridesFit(p.dtype,
                        {{"Q", p.q, batchUsed, p.heads > 1},
                         {"K", p.k, batchUsed, p.kvHeads > 1},
                         {"V", p.v, batchUsed, p.kvHeads > 1},
                         {"O", p.o, batchUsed, p.heads > 1},
                         {"dO", p.dO, batchUsed, p.heads > 1},
                         {"dQ", p.dQ, batchUsed, p.heads > 1},
                         {"dK", p.dK, batchUsed, p.kvHeads > 1},
                         {"dV", p.dV, batchUsed, p.kvHeads > 1}},
                        "backward kernels", whyNot))
    return Verdict::Refused;
  if (!p.buffersAligned16)
    return refuse("a data pointer is not 16-byte aligned: the backward kernels move rows in 16-byte vectors");

  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  if (p.seqQ > kMaxSeq) return refuse(concat("seqQ ", p.seqQ, " exceeds the backward kernels' limit of ", kMaxSeq));
  if (p.seqK > kMaxSeq) return refuse(concat("seqK ", p.seqK, " exceeds the backward kernels' limit of ", kMaxSeq));
  if (p.heads > kMaxInt || p.batch > kMaxInt)
    return refuse(concat("batch ", p.batch, " x heads ", p.heads, " exceeds the backward kernels' 32-bit limits"));
  const int64_t keyBlocks = (p.seqK + config.blockN - 1) / config.blockN;
  const int64_t rowBlocks = (p.seqQ + kRowsPerSmallBlock - 1) / kRowsPerSmallBlock;
  if (keyBlocks * p.kvHeads > kMaxInt / std::max<int64_t>(p.batch, 1) ||
      rowBlocks * p.heads > kMaxInt / std::max<int64_t>(p.batch, 1))
    return refuse(concat("batch ", p.batch, " x heads ", p.heads, " x seqQ ", p.seqQ, " / seqK ", p.seqK,
                         " exceeds the backward grid limit of 2^31 - 1 blocks"));

  const std::size_t rows = std::size_t(workspaceRows(p));
  const std::size_t queryBlocks = std::size_t((p.seqQ + config.blockM - 1) / config.blockM);
  plan->addRegion(kRowDot, "row dot products D", rows * sizeof(float));
  plan->addRegion(kLseLog2, "LSE in base 2", rows * sizeof(float));
  plan->addRegion(kSinkPartials, "dSinks partial sums",
                  p.dSinks ? std::size_t(p.heads * p.batch * rowBlocks) * sizeof(float) : 0);
  // Paneled: whole 64-column panels, which a kernel of a wider instance adds (zeros past the problem's head dim).
  const std::size_t dqColumns =
      config.dqPaneled ? std::size_t((p.headDim + 63) / 64 * 64) : std::size_t(dqPitchOf(p.headDim));
  plan->addRegion(kDqAccum, "FP32 dQ", rows * dqColumns * sizeof(float));
  plan->addRegion(kTurns, "dQ turn counters",
                  p.deterministic ? std::size_t(p.batch * p.heads) * queryBlocks * sizeof(int32_t) : 0);

  const int instance = config.instance.headDim;
  std::ostringstream description;
  description << kernelWords << " sm" << dev.arch() << " " << dtypeName(p.dtype) << " d" << instance;
  if (p.headDimV != p.headDim) description << " (headDim " << p.headDim << ", headDimV " << p.headDimV << ")";
  else if (instance != p.headDim) description << " (headDim " << p.headDim << " zero-padded)";
  description << " tile " << config.blockM << "x" << config.blockN << " " << config.warps << " warps";
  if (config.ctasPerSM > 1) description << " (" << config.ctasPerSM << " CTAs/SM)";
  if (config.tma) description << " + a producer warpgroup (Q, dO by tensor-map copies)";
  description << "; " << (p.dtype == DType::FP32 ? "fp32 arithmetic (no tensor cores)" : "fp32 accumulate")
              << "; dQ accumulated in fp32 workspace";
  if (p.heads != p.kvHeads) description << "; dK/dV summed over " << p.heads / p.kvHeads << " query heads on chip";
  if (p.deterministic)
    description << "; deterministic (dQ additions ordered by " << (config.descendingTurns ? "descending " : "")
                << "key block)";
  else
    description << "; not deterministic (dQ by unordered atomics)";
  plan->config = config;
  plan->description = description.str();
  plan->deterministic = p.deterministic;
  return Verdict::Served;
}

}  // namespace backward

namespace {

// Both portable families: FP32 storage on the FFMA kernel, FP16/BF16 on the tensor-core kernel.
Verdict planPortable(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot, bool fp32) {
  using namespace backward;
  if ((p.dtype == DType::FP32) != fp32) return Verdict::NotForThis;
  auto refuse = [&](const std::string &reason) {
    *whyNot = reason;
    return Verdict::Refused;
  };
  if (dev.arch() < 80)
    return refuse(concat("the backward kernels need compute capability 8.0 or newer; device ", dev.device, " is sm",
                         dev.arch()));
  if (p.paged) return refuse("paged K/V caches are not supported by the backward kernels");
  // Any head dims up to 256, Q/K's and V/O's apart, pad to the instance of the wider: a row's last 16-byte vector is
  // copied in part (the rest zero-filled) and stored in part. Strides that are not whole vectors are staged.
  const int instance = kBackwardInstances.paddedInstanceFor(p, "backward kernels", whyNot, {true, true});
  if (instance == 0) return Verdict::Refused;

  BackwardConfig config;
  config.instance = InstanceKey{p.dtype, instance};
  config.warps = kBackwardWarps;
  std::size_t shared = 0;
  int tileIndex = -1;
  if (fp32) {
    const Fp32Tile f = fp32TileFor(instance);
    shared = fp32SharedBytes(instance);
    if (shared <= dev.smemPerBlockOptin) tileIndex = 0;
    config.blockM = f.blockM;
    config.blockN = f.blockN;
  } else {
    // The first tile whose CTAs fit the SM as many at a time as it was tuned for; failing that, the first that fits
    // one CTA (the last entry of every list fits 99 KB).
    const MmaTileSet tiles = mmaTilesFor(instance);
    bool shares = false;
    for (int i = 0; i < tiles.count && tileIndex < 0; ++i)
      if (mmaTileFits(tiles.tiles[i], instance, dev.smemPerBlockOptin)) tileIndex = i, shares = true;
    for (int i = 0; i < tiles.count && tileIndex < 0; ++i) {
      shared = mmaSharedBytes(tiles.tiles[i], instance);
      if (shared <= dev.smemPerBlockOptin) tileIndex = i;
    }
    if (tileIndex >= 0) {
      const MmaTile &m = tiles.tiles[tileIndex];
      config.blockM = m.blockM;
      config.blockN = m.blockN;
      config.warps = m.warps;
      config.ctasPerSM = shares ? m.minBlocks : 1;
    }
  }
  if (tileIndex < 0)
    return refuse(concat("the smallest d", instance, " backward tile needs ", shared,
                         " bytes of shared memory per block; device ", dev.device, " (", dev.name, ") allows ",
                         dev.smemPerBlockOptin));
  config.tileIndex = tileIndex;
  config.descendingTurns = descendingTurnsPay(p);
  config.groupsPerSection = groupsPerSectionFor(dev, p);
  return planBackwardCommon(dev, p, config, kernelIdName(fp32 ? KernelId::BackwardFfma : KernelId::BackwardMma),
                            plan, whyNot);
}

Verdict planMma(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  return planPortable(dev, p, plan, whyNot, false);
}

Verdict planFfma(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  return planPortable(dev, p, plan, whyNot, true);
}

cudaError_t launchPortableMain(const DeviceInfo &, const Plan &plan, const backward::BackwardParams &params,
                               cudaStream_t stream) {
  const BackwardConfig &config = plan.as<BackwardConfig>();
  return backward::launchMain(config.instance, params, config.tileIndex, stream);
}

cudaError_t launchPortable(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                           void *workspace, cudaStream_t stream) {
  return backward::launchBackwardPipeline(dev, p, plan, buf, workspace, stream, launchPortableMain);
}

}  // namespace

FLASHATTN_REGISTER_FAMILY(KernelId::BackwardMma, Op::Backward, 100, true, "mma_sync kernel", planMma, launchPortable);
FLASHATTN_REGISTER_FAMILY(KernelId::BackwardFfma, Op::Backward, 100, true, "FFMA kernel", planFfma, launchPortable);

namespace backward {

BackwardParams makeParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) {
  const BackwardConfig &config = plan.as<BackwardConfig>();

  BackwardParams params;
  params.q = buf.q;
  params.k = buf.k;
  params.v = buf.v;
  params.o = buf.o;
  params.dO = buf.dO;
  params.lse = buf.lse;
  params.dQ = buf.dQ;
  params.dK = buf.dK;
  params.dV = buf.dV;
  params.rowDot = static_cast<float *>(plan.regionPointer(kRowDot, workspace));
  params.lseLog2 = static_cast<float *>(plan.regionPointer(kLseLog2, workspace));
  params.sinkPartials = p.dSinks ? static_cast<float *>(plan.regionPointer(kSinkPartials, workspace)) : nullptr;
  params.dqAccum = static_cast<float *>(plan.regionPointer(kDqAccum, workspace));
  params.dqTurn = p.deterministic ? static_cast<int32_t *>(plan.regionPointer(kTurns, workspace)) : nullptr;
  params.dqPaneled = config.dqPaneled;
  params.dqRows = workspaceRows(p);
  params.qBatch = p.q.batch;
  params.qHead = p.q.head;
  params.qRow = p.q.row;
  params.kBatch = p.k.batch;
  params.kHead = p.k.head;
  params.kRow = p.k.row;
  params.vBatch = p.v.batch;
  params.vHead = p.v.head;
  params.vRow = p.v.row;
  params.oBatch = p.o.batch;
  params.oHead = p.o.head;
  params.oRow = p.o.row;
  params.dOBatch = p.dO.batch;
  params.dOHead = p.dO.head;
  params.dORow = p.dO.row;
  params.dQBatch = p.dQ.batch;
  params.dQHead = p.dQ.head;
  params.dQRow = p.dQ.row;
  params.dKBatch = p.dK.batch;
  params.dKHead = p.dK.head;
  params.dKRow = p.dK.row;
  params.dVBatch = p.dV.batch;
  params.dVHead = p.dV.head;
  params.dVRow = p.dV.row;
  params.lseBatch = p.lse.batch;
  params.lseHead = p.lse.head;
  params.lseRow = p.lse.row;
  params.batch = int32_t(p.batch);
  params.heads = int32_t(p.heads);
  params.kvHeads = int32_t(p.kvHeads);
  params.headsPerKvHead = int32_t(p.heads / p.kvHeads);
  params.seqQ = int32_t(p.seqQ);
  params.seqK = int32_t(p.seqK);
  params.headDim = int32_t(p.headDim);
  params.headDimV = int32_t(p.headDimV);
  params.dqPitch = dqPitchOf(p.headDim);
  params.keyBlocks = int32_t((p.seqK + config.blockN - 1) / config.blockN);
  params.groupsPerSection = config.groupsPerSection;
  params.descendingTurns = config.descendingTurns;
  params.queryBlocks = int32_t((p.seqQ + config.blockM - 1) / config.blockM);
  params.ragged = p.ragged;
  params.cuSeqlensQ = p.cuSeqlensQ;
  params.cuSeqlensK = p.cuSeqlensK;
  params.totalQ = p.totalQ;
  params.totalK = p.totalK;
  params.seqlensK = p.seqlensK;
  params.scale = p.scale;
  params.dqScale = config.dsUnscaled ? p.scale : 1.f;
  params.softcap = p.softcap;
  params.mask = int32_t(p.mask);
  params.windowLeft = effectiveWindow(p.windowLeft, p);
  params.windowRight = effectiveWindow(p.windowRight, p);
  params.alibiSlopes = p.alibiSlopes;
  params.alibiBatchStride = p.alibiBatchStride;
  params.sinks = p.sinks;
  params.dSinks = p.dSinks;
  params.deterministic = p.deterministic;
  return params;
}

}  // namespace backward

namespace backward {

cudaError_t launchBackwardPipeline(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan,
                                   const AttnBuffers &buf, void *workspace, cudaStream_t stream,
                                   MainKernelLaunch main) {
  if (plan.workspaceBytes > 0 && workspace == nullptr) return cudaErrorInvalidValue;
  const BackwardParams params = makeParams(p, plan, buf, workspace);
  const int32_t rowBlocks = int32_t((p.seqQ + kRowsPerSmallBlock - 1) / kRowsPerSmallBlock);
  // The FP32 dQ accumulator and the turn counters (the regions from dQ to the end) start at zero.
  const std::size_t zeroedFrom = plan.regions[kDqAccum].offset;
  if (plan.workspaceBytes > zeroedFrom) {
    const cudaError_t err = cudaMemsetAsync(static_cast<unsigned char *>(workspace) + zeroedFrom, 0,
                                            plan.workspaceBytes - zeroedFrom, stream);
    if (err != cudaSuccess) return err;
  }
  cudaError_t err = launchSmall(p.dtype, params, rowBlocks, true, stream);
  if (err != cudaSuccess) return err;
  if (params.dSinks != nullptr && rowBlocks == 0) {  // no query rows: no convert CTA sums the partials
    err = cudaMemsetAsync(params.dSinks, 0, std::size_t(p.heads) * sizeof(float), stream);
    if (err != cudaSuccess) return err;
  }
  err = main(dev, plan, params, stream);
  if (err != cudaSuccess) return err;
  return launchSmall(p.dtype, params, rowBlocks, false, stream);
}

}  // namespace backward

}  // namespace flashattn::cuda
