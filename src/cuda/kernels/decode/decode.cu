// Split-KV decode: the chooser (planDecode) and the launcher (launchDecode) of src/cuda/ops.hpp.
//
// planDecode picks the instance (the narrowest compiled head dim >= the problem's, zero-filled columns in between),
// the row tiling of the GQA group times query tokens, and the chunk count from host values only (the lengths and the
// block table stay on the device): each CTA finds its own key range from the real length when it runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/kernels/merge/merge_launch.hpp"
#include "cuda/ops.hpp"

namespace flashattn::cuda {

namespace decode {
namespace {

using LaunchFn = cudaError_t (*)(const DecodeParams &, cudaStream_t);

struct Instance {
  DType dtype;
  int headDim;
  LaunchFn launch;
};

// The instances this build compiled (sources.cmake generates one file per dtype and head dim of the build's sets
// that is a multiple of 16 from 32 to 256; these are the candidates listed here).
const Instance kInstances[] = {
#if defined(FLASHATTN_HAS_DTYPE_FP16)
#if defined(FLASHATTN_HAS_HEADDIM_32)
    {DType::FP16, 32, &launchDecodeInstance<__half, 32>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_64)
    {DType::FP16, 64, &launchDecodeInstance<__half, 64>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_80)
    {DType::FP16, 80, &launchDecodeInstance<__half, 80>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_96)
    {DType::FP16, 96, &launchDecodeInstance<__half, 96>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
    {DType::FP16, 128, &launchDecodeInstance<__half, 128>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_160)
    {DType::FP16, 160, &launchDecodeInstance<__half, 160>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_192)
    {DType::FP16, 192, &launchDecodeInstance<__half, 192>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_224)
    {DType::FP16, 224, &launchDecodeInstance<__half, 224>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
    {DType::FP16, 256, &launchDecodeInstance<__half, 256>},
#endif
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
#if defined(FLASHATTN_HAS_HEADDIM_32)
    {DType::BF16, 32, &launchDecodeInstance<__nv_bfloat16, 32>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_64)
    {DType::BF16, 64, &launchDecodeInstance<__nv_bfloat16, 64>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_80)
    {DType::BF16, 80, &launchDecodeInstance<__nv_bfloat16, 80>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_96)
    {DType::BF16, 96, &launchDecodeInstance<__nv_bfloat16, 96>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
    {DType::BF16, 128, &launchDecodeInstance<__nv_bfloat16, 128>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_160)
    {DType::BF16, 160, &launchDecodeInstance<__nv_bfloat16, 160>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_192)
    {DType::BF16, 192, &launchDecodeInstance<__nv_bfloat16, 192>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_224)
    {DType::BF16, 224, &launchDecodeInstance<__nv_bfloat16, 224>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
    {DType::BF16, 256, &launchDecodeInstance<__nv_bfloat16, 256>},
#endif
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32)
#if defined(FLASHATTN_HAS_HEADDIM_32)
    {DType::FP32, 32, &launchDecodeInstance<float, 32>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_64)
    {DType::FP32, 64, &launchDecodeInstance<float, 64>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_80)
    {DType::FP32, 80, &launchDecodeInstance<float, 80>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_96)
    {DType::FP32, 96, &launchDecodeInstance<float, 96>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
    {DType::FP32, 128, &launchDecodeInstance<float, 128>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_160)
    {DType::FP32, 160, &launchDecodeInstance<float, 160>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_192)
    {DType::FP32, 192, &launchDecodeInstance<float, 192>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_224)
    {DType::FP32, 224, &launchDecodeInstance<float, 224>},
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
    {DType::FP32, 256, &launchDecodeInstance<float, 256>},
#endif
#endif
    {DType::FP32, 0, nullptr},  // end marker (keeps the array non-empty in a build without instances)
};
constexpr int kInstanceCount = int(sizeof(kInstances) / sizeof(kInstances[0])) - 1;

std::string compiledHeadDims(DType dtype) {
  std::string list;
  for (int i = 0; i < kInstanceCount; ++i)
    if (kInstances[i].dtype == dtype) list += (list.empty() ? "" : ", ") + std::to_string(kInstances[i].headDim);
  return list.empty() ? "none" : list;
}

// Index of the narrowest instance of this dtype whose head dim is >= headDim, or -1.
int findInstance(DType dtype, int64_t headDim) {
  int best = -1;
  for (int i = 0; i < kInstanceCount; ++i) {
    const Instance &c = kInstances[i];
    if (c.dtype != dtype || c.headDim < headDim) continue;
    if (best < 0 || c.headDim < kInstances[best].headDim) best = i;
  }
  return best;
}

// The CTA tiling of one problem on one instance.
struct Shape {
  int64_t kvHeads = 0;    // effective: 1 when both K and V broadcast one head through a zero head stride
  int64_t groupSize = 0;  // query heads per effective KV head
  int64_t rows = 0;       // groupSize * seqQ
  int rowTilesPerCta = 1;
  int keyGroups = 4;
  int64_t rowBlocks = 1;
  int tileKeys = 0;
  int stages = 0;
  SmemLayout smem;
};

Shape shapeOf(const AttnProblem &p, const Instance &inst) {
  Shape s;
  const int elementBytes = int(dtypeSize(p.dtype));
  const bool broadcast = p.kvHeads > 1 && p.k.head == 0 && p.v.head == 0;
  s.kvHeads = broadcast ? 1 : p.kvHeads;
  s.groupSize = p.heads / s.kvHeads;
  s.rows = s.groupSize * p.seqQ;
  const int64_t rowTiles = (s.rows + kRowsPerTile - 1) / kRowsPerTile;
  s.rowTilesPerCta = int(std::min<int64_t>(rowTiles, kMaxRowTilesPerCta));
  s.keyGroups = kWarps / s.rowTilesPerCta;
  s.rowBlocks = (rowTiles + s.rowTilesPerCta - 1) / s.rowTilesPerCta;
  s.tileKeys = tileKeys(elementBytes, inst.headDim);
  s.stages = defaultStages(elementBytes, inst.headDim);
  s.smem = smemLayout(elementBytes, inst.headDim, s.stages, s.rowTilesPerCta);
  return s;
}

// KERNELS.md: when (batch x KV heads x row blocks) already fills ~80% of the SMs, one chunk; otherwise the smallest
// count whose wave efficiency (CTAs over resident slots, last wave counted whole) is within 85% of the best count's.
int64_t chooseChunks(const DeviceInfo &dev, int64_t units, int64_t maxChunks, int ctasPerSM) {
  if (maxChunks <= 1 || double(units) >= 0.8 * double(dev.numSMs)) return 1;
  const int64_t slots = int64_t(std::max(dev.numSMs, 1)) * std::max(ctasPerSM, 1);
  const int64_t limit = std::min<int64_t>(maxChunks, 1024);
  auto efficiency = [&](int64_t chunks) {
    const int64_t ctas = units * chunks;
    const int64_t waves = (ctas + slots - 1) / slots;
    return double(ctas) / double(waves * slots);
  };
  double best = 0;
  for (int64_t c = 1; c <= limit; ++c) best = std::max(best, efficiency(c));
  for (int64_t c = 1; c <= limit; ++c)
    if (efficiency(c) >= 0.85 * best) return c;
  return 1;
}

bool multiplyFits(std::size_t a, std::size_t b, std::size_t *out) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace
}  // namespace decode

bool planDecode(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  using namespace decode;
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  if (p.ragged) {
    *whyNot = "ragged Q: the CUDA decode takes a dense Q [batch, heads, seqQ, headDim]";
    return false;
  }
  if (p.headDimV != p.headDim) {
    *whyNot = concat("headDimV ", p.headDimV, " differs from headDim ", p.headDim,
                     ": the CUDA decode needs V and K of the same head dim");
    return false;
  }
  if (p.headDim % 8 != 0) {
    *whyNot = concat("headDim ", p.headDim, " is not a multiple of 8: the CUDA decode moves rows in 16-byte vectors");
    return false;
  }
  const int index = findInstance(p.dtype, p.headDim);
  if (index < 0) {
    *whyNot = concat("headDim ", p.headDim, " with ", dtypeName(p.dtype), ": this build's CUDA decode has head dims ",
                     compiledHeadDims(p.dtype), " for ", dtypeName(p.dtype));
    return false;
  }
  const Instance &inst = kInstances[index];
  const Shape shape = shapeOf(p, inst);
  if (p.seqK > kInt32Max - 2 * shape.tileKeys) {
    *whyNot = concat("seqK ", p.seqK, " (cache capacity): the CUDA decode indexes keys in 32 bits");
    return false;
  }
  if (p.paged && p.pageSize > kInt32Max) {
    *whyNot = concat("pageSize ", p.pageSize, ": the CUDA decode indexes pages in 32 bits");
    return false;
  }
  if (p.batch > kInt32Max || p.heads > kInt32Max || shape.rows > kInt32Max || p.seqQ > kInt32Max) {
    *whyNot = concat("batch ", p.batch, ", heads ", p.heads, ", seqQ ", p.seqQ,
                     ": the CUDA decode counts them in 32 bits");
    return false;
  }
  if (shape.smem.total > dev.smemPerBlockOptin) {
    *whyNot = concat("the decode instance for headDim ", inst.headDim, " needs ", shape.smem.total,
                     " bytes of shared memory per block, the device allows ", dev.smemPerBlockOptin);
    return false;
  }

  const int64_t maxChunks = std::max<int64_t>(1, (p.seqK + shape.tileKeys - 1) / shape.tileKeys);
  const int64_t units = p.batch * shape.kvHeads * shape.rowBlocks;
  const int ctasPerSM = int(std::max<std::size_t>(
      1, std::min<std::size_t>((dev.smemPerBlockOptin + 1024) / (shape.smem.total + 1024),
                               std::size_t(std::max(dev.maxThreadsPerSM, kThreads)) / kThreads)));
  const int64_t chunks = p.numChunks > 0 ? std::min<int64_t>(p.numChunks, maxChunks)
                                         : chooseChunks(dev, units, maxChunks, ctasPerSM);
  if (units > kInt32Max / chunks) {
    *whyNot = concat("the decode grid would have ", units, " x ", chunks, " CTAs, more than one launch addresses");
    return false;
  }

  *plan = Plan{};
  plan->config = index;
  plan->numChunks = int32_t(chunks);
  plan->deterministic = true;
  if (chunks > 1) {
    std::size_t stateRows = 0, partialO = 0, partialLse = 0;
    bool fits = multiplyFits(std::size_t(chunks), std::size_t(p.batch), &stateRows) &&
                multiplyFits(stateRows, std::size_t(p.heads), &stateRows) &&
                multiplyFits(stateRows, std::size_t(p.seqQ), &stateRows) &&
                multiplyFits(stateRows, std::size_t(p.headDimV) * 4, &partialO) &&
                multiplyFits(stateRows, 4, &partialLse);
    fits = fits && partialO < (std::size_t(1) << 62);
    if (!fits) {
      *whyNot = concat("the decode workspace for ", chunks, " chunks overflows");
      return false;
    }
    plan->workspaceOffset[0] = 0;
    plan->workspaceOffset[1] = alignWorkspace(partialO);
    plan->workspaceBytes = plan->workspaceOffset[1] + alignWorkspace(partialLse);
  }
  const bool tensorCores = p.dtype != DType::FP32;
  plan->description =
      concat("cuda.decode.", tensorCores ? "mma_sync" : "simt_fp32", " ", dtypeName(p.dtype), " d", inst.headDim,
             " (headDim ", p.headDim, "): ", shape.rowTilesPerCta, " x 16-row tiles x ", shape.keyGroups,
             " key groups per CTA, ", shape.tileKeys, "-key tiles, ", shape.stages, " stages, ", chunks,
             " KV chunks", chunks > 1 ? " + merge" : "", ", ", ctasPerSM, " CTAs/SM; fp32 accumulate; deterministic");
  return true;
}

namespace decode {

DecodeParams buildDecodeParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) {
  const Shape shape = shapeOf(p, kInstances[plan.config]);
  DecodeParams d;
  d.q = buf.q;
  d.k = buf.k;
  d.v = buf.v;
  d.o = buf.o;
  d.lse = p.hasLse ? buf.lse : nullptr;
  if (plan.numChunks > 1) {
    auto *base = static_cast<unsigned char *>(workspace);
    d.partialO = reinterpret_cast<float *>(base + plan.workspaceOffset[0]);
    d.partialLse = reinterpret_cast<float *>(base + plan.workspaceOffset[1]);
  }
  d.qBatch = p.q.batch, d.qHead = p.q.head, d.qRow = p.q.row;
  d.kBatch = p.k.batch, d.kHead = p.k.head, d.kRow = p.k.row;
  d.vBatch = p.v.batch, d.vHead = p.v.head, d.vRow = p.v.row;
  d.oBatch = p.o.batch, d.oHead = p.o.head, d.oRow = p.o.row;
  d.lseBatch = p.lse.batch, d.lseHead = p.lse.head, d.lseRow = p.lse.row;
  d.batch = int32_t(p.batch);
  d.heads = int32_t(p.heads);
  d.kvHeads = int32_t(shape.kvHeads);
  d.groupSize = int32_t(shape.groupSize);
  d.seqQ = int32_t(p.seqQ);
  d.seqK = int32_t(p.seqK);
  d.headDim = int32_t(p.headDim);
  d.rows = int32_t(shape.rows);
  d.rowTilesPerCta = shape.rowTilesPerCta;
  d.keyGroups = shape.keyGroups;
  d.rowBlocks = int32_t(shape.rowBlocks);
  d.numChunks = plan.numChunks;
  d.seqlensK = p.seqlensK;
  d.paged = p.paged;
  d.blockTable = p.blockTable;
  d.pageSize = int32_t(p.pageSize);
  d.maxPagesPerSeq = int32_t(std::min<int64_t>(p.maxPagesPerSeq, std::numeric_limits<int32_t>::max()));
  d.numPages = p.numPages;
  d.scale = p.scale;
  d.softcap = p.softcap;
  d.mask = int32_t(p.mask);
  d.windowLeft = p.windowLeft;
  d.windowRight = p.windowRight;
  d.alibiSlopes = p.alibiSlopes;
  d.alibiBatchStride = p.alibiBatchStride;
  return d;
}

cudaError_t launchDecodeMerge(const AttnProblem &p, const DecodeParams &d, bool dependentLaunch,
                              cudaStream_t stream) {
  merge::MergeParams m;
  m.partialO = d.partialO;
  m.partialLse = d.partialLse;
  m.o = d.o;
  m.lse = d.lse;
  const int64_t rowsPerState = p.batch * p.heads * p.seqQ;
  m.partialOStride[0] = rowsPerState * p.headDimV;
  m.partialOStride[1] = p.heads * p.seqQ * p.headDimV;
  m.partialOStride[2] = p.seqQ * p.headDimV;
  m.partialOStride[3] = p.headDimV;
  m.partialLseStride[0] = rowsPerState;
  m.partialLseStride[1] = p.heads * p.seqQ;
  m.partialLseStride[2] = p.seqQ;
  m.partialLseStride[3] = 1;
  m.oBatch = p.o.batch, m.oHead = p.o.head, m.oRow = p.o.row;
  m.lseBatch = p.lse.batch, m.lseHead = p.lse.head, m.lseRow = p.lse.row;
  m.rows = rowsPerState;
  m.heads = p.heads;
  m.seqQ = p.seqQ;
  m.states = d.numChunks;
  m.headDimV = int32_t(p.headDimV);
  return merge::launchMergeKernel(m, p.dtype, dependentLaunch, stream);
}

}  // namespace decode

cudaError_t launchDecode(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                         void *workspace, cudaStream_t stream) {
  using namespace decode;
  if (plan.config < 0 || plan.config >= kInstanceCount || plan.numChunks < 1) return cudaErrorInvalidValue;
  const DecodeParams d = buildDecodeParams(p, plan, buf, workspace);
  const cudaError_t err = kInstances[plan.config].launch(d, stream);
  if (err != cudaSuccess || plan.numChunks == 1) return err;
  return launchDecodeMerge(p, d, dev.arch() >= 90, stream);
}

}  // namespace flashattn::cuda
