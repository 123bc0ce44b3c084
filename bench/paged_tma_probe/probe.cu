// SPDX-License-Identifier: BSD-3-Clause
// The copy rate of a paged K/V pool through tensor-map copies, without the decode around it: a pool of
// [pages][PS keys][8 KV heads][128] bf16 (K and V), each sequence's pages in a shuffled table, one CTA per (sequence,
// KV head) whose producer thread copies 64-key tiles into a 3-stage full/empty mbarrier ring (2 CTAs/SM), and four
// consumer warps that only wait for each stage, hold it `spin` ns and release it. Map modes:
//   0 rank 4 {128 columns, PS keys, 8 heads, pages}, box {64, rows}: two copies per page piece and tensor
//   1 rank 5 key-major {64, 2 halves, PS keys, 8 heads, pages}, box {64, 2, rows}: one copy per piece and tensor
//   2 rank 5 box-major {64, PS keys, 2 halves, 8 heads, pages}, box {64, rows, 2}: one copy per piece and tensor
//   3 the decode's box view {128, heads, keys, pages} (dimensions by increasing stride)
//   4 the decode's wide view {64, heads, keys, halves, pages}
// Rank-5 pieces land one after another (sub-tile-major); nothing reads or checks the data, only the rate counts.
// usage: probe PS MODE [SEQS [SPIN_NS [POOL_MB]]]   (defaults 64 sequences, 0 ns, 256 MB per tensor)
#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/primitives/ldmatrix.cuh"  // smemAddress
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/tma.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <random>

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1);} } while (0)

struct Params {
  CUtensorMap k, v;
  const int *table;
  int pagesPerSeq, ps, mode, tilesPerSeq, spinNs;
};

namespace prim = flashattn::cuda::prim;

constexpr int kStages = 3, kTile = 64, kTileBytes = kTile * 256;

__global__ void __launch_bounds__(160) probe(const __grid_constant__ Params p) {
  extern __shared__ unsigned char raw[];
  unsigned char *smem = raw + ((1024 - (prim::smemAddress(raw) & 1023)) & 1023);
  __shared__ __align__(8) unsigned long long bars[2 * kStages];
  const uint32_t full = prim::smemAddress(bars), empty = full + 8 * kStages;
  const int seq = blockIdx.x / 8, head = blockIdx.x % 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 128) {
    for (int s = 0; s < kStages; ++s) prim::mbarrierInit(full + 8 * s, 1), prim::mbarrierInit(empty + 8 * s, 4);
    prim::fenceBarrierInit();
  }
  __syncthreads();
  const int pieces = p.ps >= kTile ? 1 : kTile / p.ps, rows = kTile / pieces;
  if (warp == 4) {
    if (lane != 0) return;
    for (int x = 0; x < p.tilesPerSeq; ++x) {
      const int slot = x % kStages;
      if (x >= kStages) prim::mbarrierWait(empty + 8 * slot, ((x / kStages) - 1) & 1);
      const uint32_t bar = full + 8 * slot;
      prim::mbarrierArriveExpectTx(bar, 2 * kTileBytes);
      const uint32_t kd = prim::smemAddress(smem + slot * 2 * kTileBytes), vd = kd + kTileBytes;
      for (int j = 0; j < pieces; ++j) {
        const int key = x * kTile + j * rows;
        const int page = p.table[seq * p.pagesPerSeq + key / p.ps];
        const int row = key % p.ps;
        if (p.mode == 0) {
          for (int b = 0; b < 2; ++b) {
            prim::tensorCopy4d(kd + b * kTile * 128 + j * rows * 128, &p.k, b * 64, row, head, page, bar);
            prim::tensorCopy4d(vd + b * kTile * 128 + j * rows * 128, &p.v, b * 64, row, head, page, bar);
          }
        } else if (p.mode == 3) {  // the library's box view: {128, heads, keys, pages}
          for (int b = 0; b < 2; ++b) {
            prim::tensorCopy4d(kd + b * kTile * 128 + j * rows * 128, &p.k, b * 64, head, row, page, bar);
            prim::tensorCopy4d(vd + b * kTile * 128 + j * rows * 128, &p.v, b * 64, head, row, page, bar);
          }
        } else if (p.mode == 4) {  // the library's wide view: {64, heads, keys, boxes, pages}
          prim::tensorCopy5d(kd + j * rows * 256, &p.k, 0, head, row, 0, page, bar);
          prim::tensorCopy5d(vd + j * rows * 256, &p.v, 0, head, row, 0, page, bar);
        } else if (p.mode == 1) {
          prim::tensorCopy5d(kd + j * rows * 256, &p.k, 0, 0, row, head, page, bar);
          prim::tensorCopy5d(vd + j * rows * 256, &p.v, 0, 0, row, head, page, bar);
        } else {
          prim::tensorCopy5d(kd + j * rows * 256, &p.k, 0, row, 0, head, page, bar);
          prim::tensorCopy5d(vd + j * rows * 256, &p.v, 0, row, 0, head, page, bar);
        }
      }
    }
    return;
  }
  for (int x = 0; x < p.tilesPerSeq; ++x) {
    const int slot = x % kStages;
    prim::mbarrierWait(full + 8 * slot, (x / kStages) & 1);
    if (p.spinNs > 0) {
      uint64_t t0, t1;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
      do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while (t1 - t0 < uint64_t(p.spinNs));
    }
    __syncwarp();
    if (lane == 0) prim::mbarrierArrive(empty + 8 * slot);
  }
}

typedef CUresult (*Encode)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                           const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                           CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

int main(int argc, char **argv) {
  if (argc < 3) {
    printf("usage: probe PS MODE [SEQS [SPIN_NS [POOL_MB]]]\n");
    return 2;
  }
  const int ps = atoi(argv[1]), mode = atoi(argv[2]), seqs = argc > 3 ? atoi(argv[3]) : 64;
  if (mode < 0 || mode > 4 || ps < 1 || seqs < 1) {
    printf("PS >= 1, MODE 0..4, SEQS >= 1\n");
    return 2;
  }
  const int spin = argc > 4 ? atoi(argv[4]) : 0;
  const size_t poolBytes = size_t(argc > 5 ? atoi(argv[5]) : 256) << 20;
  const int pages = int(poolBytes / (size_t(ps) * 8 * 256));
  const int pagesPerSeq = pages / seqs;
  const int tilesPerSeq = pagesPerSeq * ps / kTile;
  void *k, *v;
  CK(cudaMalloc(&k, poolBytes));
  CK(cudaMalloc(&v, poolBytes));
  CK(cudaMemset(k, 0, poolBytes));
  CK(cudaMemset(v, 0, poolBytes));
  std::vector<int> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = i;
  std::shuffle(table.begin(), table.end(), std::mt19937(1));
  int *dTable;
  CK(cudaMalloc(&dTable, pages * sizeof(int)));
  CK(cudaMemcpy(dTable, table.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
  Encode encode;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", (void **)&encode, cudaEnableDefault, &q));
  Params p;
  p.table = dTable, p.pagesPerSeq = pagesPerSeq, p.ps = ps, p.mode = mode, p.tilesPerSeq = tilesPerSeq, p.spinNs = spin;
  const int rows = ps >= kTile ? kTile : ps;
  for (int t = 0; t < 2; ++t) {
    CUtensorMap *m = t ? &p.v : &p.k;
    void *base = t ? v : k;
    // Each mode's dimensions (innermost first), byte strides of dimensions 1.., and box.
    const cuuint64_t P = cuuint64_t(ps), N = cuuint64_t(pages), R = cuuint32_t(rows);
    struct View {
      cuuint32_t rank;
      cuuint64_t dims[5], strides[4];
      cuuint32_t box[5];
    };
    const View views[5] = {
        {4, {128, P, 8, N, 1}, {2048, 256, P * 2048, 0}, {64, cuuint32_t(R), 1, 1, 1}},
        {5, {64, 2, P, 8, N}, {128, 2048, 256, P * 2048}, {64, 2, cuuint32_t(R), 1, 1}},
        {5, {64, P, 2, 8, N}, {2048, 128, 256, P * 2048}, {64, cuuint32_t(R), 2, 1, 1}},
        {4, {128, 8, P, N, 1}, {256, 2048, P * 2048, 0}, {64, 1, cuuint32_t(R), 1, 1}},
        {5, {64, 8, P, 2, N}, {256, 2048, 128, P * 2048}, {64, 1, cuuint32_t(R), 2, 1}},
    };
    const View &view = views[mode];
    const cuuint32_t es[5] = {1, 1, 1, 1, 1};
    const CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, view.rank, base, view.dims, view.strides, view.box,
                              es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("ps %d mode %d: encode failed (%d)\n", ps, mode, int(r)); return 0; }
  }
  const int smemBytes = kStages * 2 * kTileBytes + 1024;
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes));
  int perSM = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, probe, 160, smemBytes));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int w = 0; w < 3; ++w) probe<<<seqs * 8, 160, smemBytes>>>(p);
  CK(cudaGetLastError());
  CK(cudaEventRecord(a));
  const int iters = 20;
  for (int i = 0; i < iters; ++i) probe<<<seqs * 8, 160, smemBytes>>>(p);
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  const double bytes = 2.0 * double(seqs) * tilesPerSeq * kTile * 8 * 256;
  printf("pool %5zu MB page %3d mode %d seqs %4d spin %4d ns ctas %5d (%d/SM): %7.1f GB/s, %.3f ms per pass\n", poolBytes >> 20, ps, mode, seqs, spin, seqs * 8, perSM,
         bytes / (ms / iters) / 1e6, ms / iters);
  return 0;
}
