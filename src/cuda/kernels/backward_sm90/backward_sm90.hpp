// SPDX-License-Identifier: BSD-3-Clause
// The Hopper backward family (cuda.bwd.wgmma): its tile per head dim and the instance launcher the generated files
// define. It registers itself with the backward chooser (backward_sm90.cu) ranked before the portable kernels and runs
// the portable family's pipeline (preprocess, convert, workspace) around its own main kernel. A new head dim is an
// entry in src/cuda/generate.py, its tile in sm90BackwardTileFor, its shared-memory size and its dQ accumulator layout
// (BackwardConfig::dqPaneled) in backward_sm90.cu.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/tensor_map.hpp"

namespace flashattn::cuda::backward_sm90 {

// Q/K head dims from 192 run the column-split kernel (backward_sm90_split_kernel.cuh: 64 keys per CTA, every product
// split between the two warpgroups, dQ added by bulk reduce where its staging fits, else by red.global), the others
// the d64/d128 kernel (backward_sm90_kernel.cuh: 128 keys per CTA, dQ added by bulk reduce into the paneled
// accumulator).
constexpr bool runsSplitKernel(int headDim) { return headDim >= 192; }

// The CTA shape of the wgmma main kernel for one Q/K head dim (V/O's, where narrower, runs the same shape): the
// workspace layout and grid follow from it.
struct Sm90BackwardTile {
  int blockM;  // query rows per step
  int blockN;  // keys per CTA
  int warps;
};

constexpr Sm90BackwardTile sm90BackwardTileFor(int headDim) {
  if (runsSplitKernel(headDim)) return Sm90BackwardTile{64, 64, 8};
  // d64: 128-row query blocks (at 64 rows the d64 products are too short for the per-step fixed costs); d128: two
  // consumer warpgroups of 64 keys each walk 64-row query blocks.
  return headDim == 64 ? Sm90BackwardTile{128, 128, 8} : Sm90BackwardTile{64, 128, 8};
}

// d128 without a mask, window or deterministic order, in the producer-warpgroup form: 80-row query blocks
// (FlashAttention-3's tile), so each step's products grow by a quarter against its fixed costs (barriers, the dS
// hand-over, the statistics, the stage's turn). 80 rows are not a wgmma M, so dQ is computed transposed (dQ^T = K^T
// dS^T: warpgroup g its 64 head-dim rows over the 80 queries) and added by one bulk reduce-add per warpgroup. Two
// stages instead of three pay for the larger tiles in shared memory. Causal problems keep 64-row blocks (their
// diagonal blocks' masked share grows with the block).
constexpr int kWideBlockM = 80;
constexpr bool hasWideForm(int headDim) { return headDim == 128; }

// Q/K 192 with V/O 128, without softcap or ALiBi, in the producer form: 96 keys per CTA
// (backward_sm90_wide_keys_kernel.cuh) instead of the split kernel's 64, so each query block's Q/dO loads and dQ
// additions serve 1.5x the products. 192/192 would need 72 + 72 accumulator floats for dK^T and dV^T, past the
// consumers' registers with dQ and S/dP beside them.
constexpr int kWideKeysBlockN = 96;
constexpr bool hasWideKeysForm(int headDim, int headDimV) { return headDim == 192 && headDimV == 128; }

// Whether an instance's kernel has its producer form: Q and dO by tensor-map copies and the row statistics by
// cp.async, issued by a third warpgroup, while the two consumer warpgroups take the registers it leaves. The d64/d128
// kernel at d128 (d64 keeps the form where every consumer thread issues its share of the copies: its 128-row steps
// need all 255 registers); the split kernel at 192 (Q/K 192 with V/O 128 included) and 256, whose consumers fit in
// 232 registers.
constexpr bool hasTmaForm(int headDim) { return headDim == 128 || headDim == 192 || headDim == 256; }

// The producer form's setmaxnreg: what the producer warpgroup releases from the 168 registers a thread has at entry
// (384 threads) is what the consumers take, so 2 x consumer + producer = 3 x 168 (multiples of 8). The d128 80-row
// form needs 240 per consumer (at 232 ptxas spilled 528 bytes); the 64-row forms (the split kernel's too) fit in 232,
// which leaves the producer 40: at 24 its loop spilled 12 bytes every step.
constexpr int consumerRegisters(int blockM) { return blockM == kWideBlockM ? 240 : 232; }
constexpr int producerRegisters(int blockM) { return 3 * 168 - 2 * consumerRegisters(blockM); }
static_assert(producerRegisters(kWideBlockM) == 24 && producerRegisters(64) == 40, "setmaxnreg takes multiples of 8");

// Softcap and ALiBi: every instance is also compiled with the forward's logit transform (the kernels' Transform
// flag), unordered. The d64/d128 kernel's in the form hasTmaForm names, over the instance's full width, with 64-row
// blocks at d128 (d64 then computes P and dS in one pass, as d128 does: dS needs the softcap's derivative beside P);
// the split kernel's likewise computes P^T and dS^T in one pass once both products have landed. Deterministic mode
// and the d128 kernel's cp.async form leave these problems to the portable kernel.
constexpr bool hasTransformForm(int headDim) { return headDim == 64 || headDim == 128 || runsSplitKernel(headDim); }

// The narrower contraction of S^T and dP^T the d64/d128 kernel of a head dim is also compiled with (0: none), for
// zero-padded problems whose columns end within it: D96 on d128 (its two products over the head dim were a quarter
// zeros; dV, dK and dQ keep the instance's width). The launch takes it wherever the problem's head dim allows.
constexpr int trimmedQKWidth(int headDim) { return headDim == 128 ? 96 : 0; }

// The width S^T and dP^T contract over for a problem of head dim problemHeadDim on the d64/d128 instance of headDim:
// the trimmed one where the problem's columns end within it. The one rule the launch follows and the plan describes.
constexpr int qkWidthFor(int headDim, int64_t problemHeadDim) {
  return trimmedQKWidth(headDim) > 0 && problemHeadDim <= trimmedQKWidth(headDim) ? trimmedQKWidth(headDim) : headDim;
}

// What the d64/d128 kernel receives: the portable family's parameters and, for the producer-warpgroup form, the
// tensor maps of Q and dO: [D][seqQ][heads][batch] in boxes of 64 columns x BlockM rows, or [D][tokens][heads][1] for
// a ragged batch, whose last block of each sequence comes by cp.async instead (rows past a sequence must be zeros,
// which the next sequence's rows are not).
struct Sm90KernelParams {
  CUtensorMap qMap = {};
  CUtensorMap dOMap = {};
  backward::BackwardParams b;
};

// The maps of Sm90KernelParams for params (dtype FP16 or BF16), each box 64 columns x blockM rows over the problem's
// head dims (the copy engine zero-fills the columns of a wider instance); false when the driver refuses a map.
inline bool encodeQueryMaps(const backward::BackwardParams &p, DType dtype, int blockM, Sm90KernelParams *kp) {
  const int64_t rows = p.ragged ? p.totalQ : p.seqQ;
  const int64_t batch = p.ragged ? 1 : p.batch;
  auto spec = [&](const void *base, int64_t columns, int64_t rowStride, int64_t headStride, int64_t batchStride) {
    return rowTileMapSpec(base, dtype, columns, rows, p.heads, batch, rowStride, headStride, batchStride, blockM);
  };
  return encodeTiledMap(spec(p.q, p.headDim, p.qRow, p.qHead, p.qBatch), &kp->qMap) &&
         encodeTiledMap(spec(p.dO, p.headDimV, p.dORow, p.dOHead, p.dOBatch), &kp->dOMap);
}

// The main kernel of one instance (params built by backward::makeParams with this family's block shape); `device`
// is the current device, on which the kernel's shared-memory opt-in is made once. Defined by the generated files.
// HeadDimV: V/O's head dim, HeadDim's where the instance is of one head dim. tma: the producer-warpgroup form (the
// plan checked that hasTmaForm and that the maps encode);
// wide: the instance's wider tile (the plan checked that the problem takes it): the 80-row form where hasWideForm, the
// 96-key kernel where hasWideKeysForm.
template <typename Element, int HeadDim, int HeadDimV>
cudaError_t launchSm90Instance(const backward::BackwardParams &params, bool tma, bool wide, int device,
                               cudaStream_t stream);

}  // namespace flashattn::cuda::backward_sm90
