// The backward family's chooser (planBackward) and launcher (launchBackward): see src/cuda/ops.hpp and
// backward_params.hpp for the scheme. This file also holds the two small kernels around the main one:
//   preprocess: per query row D = rowsum(dO * O) and LSE * log2 e (+inf for a row with no visible key), FP32;
//   convert:    FP32 dQ accumulator -> dQ in the storage type and the caller's strides (nothing else applied).
//
// Workspace (Plan.workspaceOffset): [0] D per row, [1] LSE * log2 e per row, [2] FP32 dQ [row][headDim],
// [3] deterministic mode only: one int32 turn counter per (sequence, head, query block). Rows are indexed by
// workspaceRow(): dense [batch][heads][seqQ], ragged [heads][totalQ]. [2] and [3] are zeroed by one memset per call.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#if defined(FLASHATTN_HAS_SM90A_BACKWARD)
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"
#endif
#include "cuda/instance_set.hpp"
#include "cuda/ops.hpp"
#include "cuda/primitives/math.cuh"

namespace flashattn::cuda {
namespace backward {
namespace {

constexpr int kRowsPerSmallBlock = 64;  // preprocess and convert: query rows per CTA (8 warps)

// Plan.config packs the instance head dim and the tile index.
constexpr int32_t packConfig(int instanceHeadDim, int tileIndex) { return instanceHeadDim * 8 + tileIndex; }
constexpr int configHeadDim(int32_t config) { return config / 8; }
constexpr int configTile(int32_t config) { return config % 8; }

struct BlockShape {
  int blockM;
  int blockN;
  int warps;
  int ctasPerSM;
};

BlockShape blockShapeFor(DType t, int instanceHeadDim, int tileIndex) {
  if (t == DType::FP32) {
    const Fp32Tile f = fp32TileFor(instanceHeadDim);
    return BlockShape{f.blockM, f.blockN, kBackwardWarps, 1};
  }
#if defined(FLASHATTN_HAS_SM90A_BACKWARD)
  if (tileIndex == backward_sm90::kSm90BackwardTile) {
    const backward_sm90::Sm90BackwardTile s = backward_sm90::sm90BackwardTileFor(instanceHeadDim);
    return BlockShape{s.blockM, s.blockN, s.warps, 1};
  }
#endif
  const MmaTile m = mmaTilesFor(instanceHeadDim).tiles[tileIndex];
  return BlockShape{m.blockM, m.blockN, m.warps, m.minBlocks};
}

// Every sub-buffer of the workspace, for the plan (sizes) and the launch (pointers).
struct WorkspaceLayout {
  std::size_t offset[4];
  std::size_t bytes;
  std::size_t zeroedBytes;  // from offset[2] to the end
};

WorkspaceLayout workspaceLayout(const AttnProblem &p, const BlockShape &shape) {
  const std::size_t rows =
      p.ragged ? std::size_t(p.heads) * std::size_t(p.totalQ) : std::size_t(p.batch * p.heads) * std::size_t(p.seqQ);
  const std::size_t queryBlocks = std::size_t((p.seqQ + shape.blockM - 1) / shape.blockM);
  WorkspaceLayout w{};
  w.offset[0] = 0;
  w.offset[1] = alignWorkspace(rows * sizeof(float));
  w.offset[2] = w.offset[1] + alignWorkspace(rows * sizeof(float));
  w.offset[3] = w.offset[2] + alignWorkspace(rows * std::size_t(p.headDim) * sizeof(float));
  const std::size_t turns =
      p.deterministic ? alignWorkspace(std::size_t(p.batch * p.heads) * queryBlocks * sizeof(int32_t)) : 0;
  w.bytes = w.offset[3] + turns;
  w.zeroedBytes = w.bytes - w.offset[2];
  return w;
}

// ---- preprocess and convert ----------------------------------------------------------------------------------------

// 16 bytes of storage as floats.
template <typename Element>
struct Vec16 {
  static constexpr int kCount = 16 / sizeof(Element);
};

template <typename Element>
__device__ __forceinline__ void loadFloats(const Element *src, float (&out)[Vec16<Element>::kCount]) {
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

template <typename Element>
__device__ __forceinline__ void storeFloats(Element *dst, const float (&in)[Vec16<Element>::kCount]) {
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
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int32_t i = item.rowBlock * kRowsPerSmallBlock + warp * kRowsPerWarp + r;
    if (i >= seq.seqQ) break;
    const Element *oRow = oHead + int64_t(i) * p.oRow;
    const Element *dORow = dOHead + int64_t(i) * p.dORow;
    float acc = 0.f;
    for (int c = lane * kVec; c < p.headDim; c += 32 * kVec) {
      float o[kVec], g[kVec];
      loadFloats<Element>(oRow + c, o);
      loadFloats<Element>(dORow + c, g);
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
      p.lseLog2[row] = lse == -INFINITY ? INFINITY : lse * prim::kLog2e;
    }
  }
}

template <typename Element>
__global__ void __launch_bounds__(kBackwardThreads) convertKernel(const __grid_constant__ BackwardParams p,
                                                                  int32_t rowBlocks) {
  constexpr int kVec = Vec16<Element>::kCount;
  const RowBlockItem item = decodeRowBlock(rowBlocks, p.heads);
  const SequenceExtent seq = sequenceExtent(p, item.batch);
  const int vectorsPerRow = p.headDim / kVec;
  Element *dQHead = static_cast<Element *>(p.dQ) + int64_t(item.batch) * p.dQBatch + int64_t(item.head) * p.dQHead +
                    seq.qStart * p.dQRow;
  for (int idx = int(threadIdx.x); idx < kRowsPerSmallBlock * vectorsPerRow; idx += kBackwardThreads) {
    const int32_t i = item.rowBlock * kRowsPerSmallBlock + idx / vectorsPerRow;
    const int c = (idx % vectorsPerRow) * kVec;
    if (i >= seq.seqQ) break;  // idx grows with i: every later index is past the sequence too
    const float *src = p.dqAccum + workspaceRow(p, item.batch, item.head, seq, i) * p.headDim + c;
    float values[kVec];
#pragma unroll
    for (int e = 0; e < kVec; e += 4) {
      const float4 f = *reinterpret_cast<const float4 *>(src + e);
      values[e] = f.x;
      values[e + 1] = f.y;
      values[e + 2] = f.z;
      values[e + 3] = f.w;
    }
    storeFloats<Element>(dQHead + int64_t(i) * p.dQRow + c, values);
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

cudaError_t launchMain(DType t, int instanceHeadDim, const BackwardParams &params, int tileIndex,
                       cudaStream_t stream) {
  switch (t) {
#define FLASHATTN_BACKWARD_DIM_CASE(Element, d) \
  case d:                                       \
    return launchMainInstance<Element, d>(params, tileIndex, stream);
#define FLASHATTN_BACKWARD_DIM_SWITCH(Element)                               \
  switch (instanceHeadDim) {                                                 \
    FLASHATTN_BACKWARD_DIMS(Element)                                         \
    default:                                                                 \
      return cudaErrorInvalidValue;                                          \
  }
#if defined(FLASHATTN_HAS_HEADDIM_64)
#define FLASHATTN_BACKWARD_D64(E) FLASHATTN_BACKWARD_DIM_CASE(E, 64)
#else
#define FLASHATTN_BACKWARD_D64(E)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_96)
#define FLASHATTN_BACKWARD_D96(E) FLASHATTN_BACKWARD_DIM_CASE(E, 96)
#else
#define FLASHATTN_BACKWARD_D96(E)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
#define FLASHATTN_BACKWARD_D128(E) FLASHATTN_BACKWARD_DIM_CASE(E, 128)
#else
#define FLASHATTN_BACKWARD_D128(E)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_192)
#define FLASHATTN_BACKWARD_D192(E) FLASHATTN_BACKWARD_DIM_CASE(E, 192)
#else
#define FLASHATTN_BACKWARD_D192(E)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
#define FLASHATTN_BACKWARD_D256(E) FLASHATTN_BACKWARD_DIM_CASE(E, 256)
#else
#define FLASHATTN_BACKWARD_D256(E)
#endif
#define FLASHATTN_BACKWARD_DIMS(E) \
  FLASHATTN_BACKWARD_D64(E) FLASHATTN_BACKWARD_D96(E) FLASHATTN_BACKWARD_D128(E) FLASHATTN_BACKWARD_D192(E) \
  FLASHATTN_BACKWARD_D256(E)
#if defined(FLASHATTN_HAS_DTYPE_FP16)
    case DType::FP16:
      FLASHATTN_BACKWARD_DIM_SWITCH(__half)
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
    case DType::BF16:
      FLASHATTN_BACKWARD_DIM_SWITCH(__nv_bfloat16)
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32)
    case DType::FP32:
      FLASHATTN_BACKWARD_DIM_SWITCH(float)
#endif
    default:
      return cudaErrorInvalidValue;
  }
#undef FLASHATTN_BACKWARD_DIMS
#undef FLASHATTN_BACKWARD_D64
#undef FLASHATTN_BACKWARD_D96
#undef FLASHATTN_BACKWARD_D128
#undef FLASHATTN_BACKWARD_D192
#undef FLASHATTN_BACKWARD_D256
#undef FLASHATTN_BACKWARD_DIM_SWITCH
#undef FLASHATTN_BACKWARD_DIM_CASE
}

cudaError_t launchSmall(DType t, const BackwardParams &params, int32_t rowBlocks, bool preprocess,
                        cudaStream_t stream) {
  switch (t) {
#if defined(FLASHATTN_HAS_DTYPE_FP16)
    case DType::FP16: return launchSmallKernels<__half>(params, rowBlocks, preprocess, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
    case DType::BF16: return launchSmallKernels<__nv_bfloat16>(params, rowBlocks, preprocess, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32)
    case DType::FP32: return launchSmallKernels<float>(params, rowBlocks, preprocess, stream);
#endif
    default: return cudaErrorInvalidValue;
  }
}

// A window wider than both sequences is no window; dropping it keeps the kernels' 64-bit window arithmetic far from
// overflow for huge values.
int64_t effectiveWindow(int64_t window, const AttnProblem &p) {
  return window >= p.seqQ + p.seqK ? -1 : window;
}

}  // namespace
}  // namespace backward

bool planBackward(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  using namespace backward;
  auto refuse = [&](const std::string &reason) {
    if (whyNot != nullptr) *whyNot = reason;
    return false;
  };
  if (dev.arch() < 80)
    return refuse(concat("the backward kernels need compute capability 8.0 or newer; device ", dev.device, " is sm",
                         dev.arch()));
  if (p.paged) return refuse("paged K/V caches are not supported by the backward kernels");
  if (p.headDimV != p.headDim)
    return refuse(concat("headDimV ", p.headDimV, " differs from headDim ", p.headDim,
                         ": the backward kernels need equal head dims for Q/K and V/O"));
  if (p.headDim < 8 || p.headDim > 256 || p.headDim % 8 != 0)
    return refuse(concat("headDim ", p.headDim,
                         " is not supported by the backward kernels: it must be a multiple of 8 in [8, 256]"));
  if (!dtypeCompiled(p.dtype))
    return refuse(concat("data type ", dtypeName(p.dtype), " has no backward kernel in this build (FLASHATTN_DTYPES)"));
  const int instance = nativeHeadDimFor(p.headDim);
  if (!headDimCompiled(instance))
    return refuse(concat("headDim ", p.headDim, " needs the d", instance,
                         " backward instance, which this build does not have (FLASHATTN_HEAD_DIMS: compiled ",
                         compiledHeadDims(), ")"));

  // Every row moves in 16-byte vectors (the CUDA backend frame enforces this too; repeated here because the kernels
  // depend on it).
  const int64_t perVector = int64_t(16 / dtypeSize(p.dtype));
  const bool batchUsed = !p.ragged && p.batch > 1;
  const struct {
    const char *name;
    const Layout &layout;
    bool headUsed;
  } tensors[] = {{"Q", p.q, p.heads > 1},   {"K", p.k, p.kvHeads > 1},   {"V", p.v, p.kvHeads > 1},
                 {"O", p.o, p.heads > 1},   {"dO", p.dO, p.heads > 1},   {"dQ", p.dQ, p.heads > 1},
                 {"dK", p.dK, p.kvHeads > 1}, {"dV", p.dV, p.kvHeads > 1}};
  for (const auto &t : tensors) {
    const int64_t strides[3] = {batchUsed ? t.layout.batch : 0, t.headUsed ? t.layout.head : 0, t.layout.row};
    const char *names[3] = {"batch", "head", "row"};
    for (int i = 0; i < 3; ++i)
      if (strides[i] % perVector != 0)
        return refuse(concat(t.name, " ", names[i], " stride is ", strides[i], " elements, not a multiple of ",
                             perVector, ": the backward kernels move rows in 16-byte vectors"));
  }

  int tileIndex = -1;
  std::size_t shared = 0;
  if (p.dtype == DType::FP32) {
    shared = fp32SharedBytes(instance);
    if (shared <= dev.smemPerBlockOptin) tileIndex = 0;
  } else {
    // The first tile whose CTAs fit the SM as many at a time as it was tuned for; failing that, the first that fits
    // one CTA (the last entry of every list fits 99 KB).
    const MmaTileSet tiles = mmaTilesFor(instance);
    for (int i = 0; i < tiles.count && tileIndex < 0; ++i)
      if (mmaTileFits(tiles.tiles[i], instance, dev.smemPerBlockOptin)) tileIndex = i;
    for (int i = 0; i < tiles.count && tileIndex < 0; ++i) {
      shared = mmaSharedBytes(tiles.tiles[i], instance);
      if (shared <= dev.smemPerBlockOptin) tileIndex = i;
    }
  }
  if (tileIndex < 0)
    return refuse(concat("the smallest d", instance, " backward tile needs ", shared,
                         " bytes of shared memory per block; device ", dev.device, " (", dev.name, ") allows ",
                         dev.smemPerBlockOptin));
#if defined(FLASHATTN_HAS_SM90A_BACKWARD)
  // The wgmma kernel takes over the main kernel where it serves the problem (same workspace scheme, own block shape);
  // on an sm90 device the description says why it does not.
  std::string wgmmaWhyNot;
  bool sm90 = false;
  if (p.dtype != DType::FP32 && instance != p.headDim)
    wgmmaWhyNot = concat("headDim ", p.headDim, " is padded to the d", instance, " instance");
  else if (p.dtype != DType::FP32)
    sm90 = backward_sm90::sm90BackwardSupports(dev, p, &wgmmaWhyNot);
  if (sm90) tileIndex = backward_sm90::kSm90BackwardTile;
#else
  const bool sm90 = false;
  const std::string wgmmaWhyNot;
#endif
  const BlockShape shape = blockShapeFor(p.dtype, instance, tileIndex);

  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  if (p.seqQ > kMaxSeq)
    return refuse(concat("seqQ ", p.seqQ, " exceeds the backward kernels' limit of ", kMaxSeq));
  if (p.seqK > kMaxSeq)
    return refuse(concat("seqK ", p.seqK, " exceeds the backward kernels' limit of ", kMaxSeq));
  if (p.heads > kMaxInt || p.batch > kMaxInt)
    return refuse(concat("batch ", p.batch, " x heads ", p.heads, " exceeds the backward kernels' 32-bit limits"));
  const int64_t keyBlocks = (p.seqK + shape.blockN - 1) / shape.blockN;
  const int64_t mainBlocks = mulSat(mulSat(keyBlocks, p.kvHeads), p.batch);  // K may broadcast: unbounded by spans
  const int64_t rowBlocks = (p.seqQ + kRowsPerSmallBlock - 1) / kRowsPerSmallBlock;
  const int64_t smallBlocks = rowBlocks * p.heads * p.batch;
  if (mainBlocks > kMaxInt || smallBlocks > kMaxInt)
    return refuse(concat("batch ", p.batch, " x heads ", p.heads, " x seqQ ", p.seqQ, " / seqK ", p.seqK,
                         " exceeds the backward grid limit of 2^31 - 1 blocks"));

  const WorkspaceLayout ws = workspaceLayout(p, shape);
  std::ostringstream description;
  if (p.dtype == DType::FP32)
    description << "cuda.bwd.ffma sm" << dev.arch() << " fp32 d" << instance;
  else if (sm90)
    description << "cuda.bwd.wgmma sm" << dev.arch() << " " << dtypeName(p.dtype) << " d" << instance;
  else
    description << "cuda.bwd.mma_sync sm" << dev.arch() << " " << dtypeName(p.dtype) << " d" << instance;
  if (instance != p.headDim) description << " (headDim " << p.headDim << " zero-padded)";
  description << " tile " << shape.blockM << "x" << shape.blockN << " " << shape.warps << " warps";
  if (!sm90 && shape.ctasPerSM > 1 && mmaTileFits(mmaTilesFor(instance).tiles[tileIndex], instance, dev.smemPerBlockOptin))
    description << " (" << shape.ctasPerSM << " CTAs/SM)";
  description << "; "
              << (p.dtype == DType::FP32 ? "fp32 arithmetic (no tensor cores)" : "fp32 accumulate")
              << "; dQ accumulated in fp32 workspace";
  if (p.heads != p.kvHeads) description << "; dK/dV summed over " << p.heads / p.kvHeads << " query heads on chip";
  description << (p.deterministic ? "; deterministic (dQ additions ordered by key block)"
                                  : "; not deterministic (dQ by unordered atomics)");
  if (dev.arch() == 90 && !sm90 && !wgmmaWhyNot.empty()) description << "; wgmma kernel not used: " << wgmmaWhyNot;

  plan->description = description.str();
  plan->deterministic = p.deterministic;
  plan->workspaceBytes = ws.bytes;
  for (int i = 0; i < 4; ++i) plan->workspaceOffset[i] = ws.offset[i];
  plan->config = packConfig(instance, tileIndex);
  plan->numChunks = 0;
  return true;
}

namespace backward {

BackwardParams makeParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) {
  const BlockShape shape = blockShapeFor(p.dtype, configHeadDim(plan.config), configTile(plan.config));
  const WorkspaceLayout ws = workspaceLayout(p, shape);
  unsigned char *base = static_cast<unsigned char *>(workspace);

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
  params.rowDot = reinterpret_cast<float *>(base + ws.offset[0]);
  params.lseLog2 = reinterpret_cast<float *>(base + ws.offset[1]);
  params.dqAccum = reinterpret_cast<float *>(base + ws.offset[2]);
  params.dqTurn = p.deterministic ? reinterpret_cast<int32_t *>(base + ws.offset[3]) : nullptr;
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
  params.keyBlocks = int32_t((p.seqK + shape.blockN - 1) / shape.blockN);
  params.queryBlocks = int32_t((p.seqQ + shape.blockM - 1) / shape.blockM);
  params.ragged = p.ragged;
  params.cuSeqlensQ = p.cuSeqlensQ;
  params.cuSeqlensK = p.cuSeqlensK;
  params.totalQ = p.totalQ;
  params.totalK = p.totalK;
  params.seqlensK = p.seqlensK;
  params.scale = p.scale;
  params.softcap = p.softcap;
  params.mask = int32_t(p.mask);
  params.windowLeft = effectiveWindow(p.windowLeft, p);
  params.windowRight = effectiveWindow(p.windowRight, p);
  params.alibiSlopes = p.alibiSlopes;
  params.alibiBatchStride = p.alibiBatchStride;
  params.deterministic = p.deterministic;
  return params;
}

}  // namespace backward

cudaError_t launchBackward(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                           void *workspace, cudaStream_t stream) {
  using namespace backward;
  (void)dev;
  const int instance = configHeadDim(plan.config);
  const int tileIndex = configTile(plan.config);
  const WorkspaceLayout ws = workspaceLayout(p, blockShapeFor(p.dtype, instance, tileIndex));
  if (ws.bytes > 0 && workspace == nullptr) return cudaErrorInvalidValue;
  const void *pointers[] = {buf.q, buf.k, buf.v, buf.o, buf.dO, buf.dQ, buf.dK, buf.dV, workspace};
  for (const void *pointer : pointers)
    if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0) return cudaErrorMisalignedAddress;
  const BackwardParams params = makeParams(p, plan, buf, workspace);
  const int32_t rowBlocks = int32_t((p.seqQ + kRowsPerSmallBlock - 1) / kRowsPerSmallBlock);
  if (ws.zeroedBytes > 0) {
    const cudaError_t err =
        cudaMemsetAsync(static_cast<unsigned char *>(workspace) + ws.offset[2], 0, ws.zeroedBytes, stream);
    if (err != cudaSuccess) return err;
  }
  cudaError_t err = launchSmall(p.dtype, params, rowBlocks, true, stream);
  if (err != cudaSuccess) return err;
#if defined(FLASHATTN_HAS_SM90A_BACKWARD)
  if (tileIndex == backward_sm90::kSm90BackwardTile)
    err = backward_sm90::launchBackwardSm90(p.dtype, instance, params, dev.device, stream);
  else
#endif
    err = launchMain(p.dtype, instance, params, tileIndex, stream);
  if (err != cudaSuccess) return err;
  return launchSmall(p.dtype, params, rowBlocks, false, stream);
}

}  // namespace flashattn::cuda
