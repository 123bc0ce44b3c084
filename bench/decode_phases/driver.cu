// SPDX-License-Identifier: BSD-3-Clause
// Not part of the CMake build (bench/decode_phases/run.sh builds it): where the time of one decode call goes. Links the
// instrumented libflashattn of run.sh (per-CTA %globaltimer stamps, dumped to $FLASHATTN_DECODE_PHASES at exit) and
// times, on
// the bench's shape (GQA 32/8, D128, bf16, one token, inputs rotated over >= 512 MB):
//   lib    flashAttnDecodeChunk: per call (events), back to back, graph of 30
//   empty  an empty kernel of the decode's grid / block / smem / 640-byte params, with and without a 16-CTA cluster,
//          and launched through the driver API (cuLaunchKernel) beside <<<>>>
//   stream the decode's bytes read by 1D bulk copies into a 3-stage 32 KB ring, no math (the floor of a one-wave read)
// usage: driver B L [chunks] [lengths 0|1] [what: lib,empty,stream]; bench/decode_phases/run.sh builds and runs it.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "CUDA %s line %d: %s\n", #x, __LINE__, cudaGetErrorString(e_));     \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)
#define FA(x)                                                                                                  \
  do {                                                                                                         \
    flashAttnStatus_t s_ = (x);                                                                                \
    if (s_ != FLASHATTN_STATUS_SUCCESS) {                                                                      \
      char m_[512];                                                                                            \
      flashAttnGetLastErrorMessage(m_, sizeof m_);                                                             \
      std::fprintf(stderr, "flashattn %s line %d: %s: %s\n", #x, __LINE__, flashAttnGetErrorString(s_), m_); \
      std::exit(2);                                                                                            \
    }                                                                                                          \
  } while (0)

static cudaStream_t stream;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per call with its own events on an idle stream (the bench's and peers.py's method), us.
static double perCall(const std::function<void(int)> &call, int &index, int reps = 30) {
  for (int i = 0; i < 5; ++i) call(index++);
  CK(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, stream));
    call(index++);
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return median(t);
}

static double backToBack(const std::function<void(int)> &call, int &index, int reps = 30) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaStreamSynchronize(stream));
  CK(cudaEventRecord(a, stream));
  for (int i = 0; i < reps; ++i) call(index++);
  CK(cudaEventRecord(b, stream));
  CK(cudaEventSynchronize(b));
  float ms;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms * 1e3 / reps;
}

static double graphPerCall(const std::function<void(int)> &call, int &index, int reps = 30, int replays = 5) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) call(index++);
  CK(cudaStreamEndCapture(stream, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, stream));
  CK(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < replays; ++r) {
    CK(cudaEventRecord(a, stream));
    CK(cudaGraphLaunch(ge, stream));
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3 / reps);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return median(t);
}

__global__ void spinKernel(long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while ((long long)(t - t0) < ns);
}

// Host time of one call: calls queued behind a 20 ms spin, so nothing waits on the device; us per call.
static double hostTime(const std::function<void(int)> &call, int &index, int reps = 30) {
  CK(cudaStreamSynchronize(stream));
  spinKernel<<<1, 1, 0, stream>>>(20000000);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) call(index++);
  const auto t1 = std::chrono::steady_clock::now();
  CK(cudaStreamSynchronize(stream));
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / reps;
}

// ---------------------------------------------------------------------------------------------- floor kernels
struct Big {
  unsigned char bytes[640];
};

__global__ void emptyKernel(const __grid_constant__ Big p) {
  if (p.bytes[threadIdx.x % 640] == 255 && threadIdx.x == 1000) printf("x");
}

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t smemAddr(const void *p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ bool tryWait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok;
}

struct StreamParams {
  const unsigned char *k, *v;
  long long unitBytes;  // bytes of one (batch, head) K or V
  int chunks, tiles;    // tiles of 64 keys per unit
  unsigned long long *stamps;
  float *sink;
};

// One CTA per (unit, chunk): a producer warp streams the chunk's K and V 16 KB pieces into a 3-stage ring, four
// consumer warps wait for each stage, read a word, release it.
__global__ void __launch_bounds__(160) streamKernel(const __grid_constant__ StreamParams p) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bars[6];
  const unsigned long long t0 = gtime();
  const int unit = blockIdx.x / p.chunks, chunk = blockIdx.x % p.chunks;
  const int begin = int((long long)chunk * p.tiles / p.chunks), end = int((long long)(chunk + 1) * p.tiles / p.chunks);
  const int n = end - begin;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t full = smemAddr(&bars[0]), empty = smemAddr(&bars[3]);
  unsigned long long t1 = 0, t2 = 0, t3 = 0;
  if (threadIdx.x == 128) {
    for (int s = 0; s < 3; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(full + 8 * s));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 4;" ::"r"(empty + 8 * s));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 4) {
    if (lane == 0) {
      for (int x = 0; x < n; ++x) {
        const int s = x % 3;
        if (x >= 3)
          while (!tryWait(empty + 8 * s, uint32_t(x / 3 - 1) & 1u)) {
          }
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(full + 8 * s), "r"(32768)
                     : "memory");
        const long long off = (long long)unit * p.unitBytes + (long long)(begin + x) * 16384;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16384, [%2];" ::"r"(
                smemAddr(smem + s * 32768)),
            "l"(p.k + off), "r"(full + 8 * s)
            : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16384, [%2];" ::"r"(
                smemAddr(smem + s * 32768 + 16384)),
            "l"(p.v + off), "r"(full + 8 * s)
            : "memory");
        if (x == 2 || x == n - 1) t1 = t1 ? t1 : gtime();
      }
    }
  } else {
    float acc = 0.f;
    for (int x = 0; x < n; ++x) {
      const int s = x % 3;
      while (!tryWait(full + 8 * s, uint32_t(x / 3) & 1u)) {
      }
      if (x == 0) t2 = gtime();
      acc += reinterpret_cast<const float *>(smem + s * 32768)[threadIdx.x];
      __syncwarp();
      if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(empty + 8 * s) : "memory");
    }
    t3 = gtime();
    if (acc == 12345.f) p.sink[blockIdx.x] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long *st = p.stamps + blockIdx.x * 8;
    st[0] = t0, st[2] = t2, st[3] = t3, st[6] = gtime();
  }
  if (threadIdx.x == 128) p.stamps[blockIdx.x * 8 + 1] = t1;
}

static void printStamps(const char *what, const std::vector<unsigned long long> &st, int blocks) {
  unsigned long long base = ~0ull;
  for (int b = 0; b < blocks; ++b) base = std::min(base, st[b * 8]);
  auto stat = [&](int slot) {
    std::vector<double> v;
    for (int b = 0; b < blocks; ++b)
      if (st[b * 8 + slot]) v.push_back(double(st[b * 8 + slot] - base) * 1e-3);
    if (v.empty()) return std::string("-");
    std::sort(v.begin(), v.end());
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.2f/%.2f/%.2f", v.front(), v[v.size() / 2], v.back());
    return std::string(buf);
  };
  std::printf("STAMPS %s (us from first CTA start, min/med/max): start %s issued %s firstTile %s lastTile %s end %s\n",
              what, stat(0).c_str(), stat(1).c_str(), stat(2).c_str(), stat(3).c_str(), stat(6).c_str());
}

int main(int argc, char **argv) {
  const int B = argc > 1 ? std::atoi(argv[1]) : 1;
  const int L = argc > 2 ? std::atoi(argv[2]) : 8192;
  const int chunksArg = argc > 3 ? std::atoi(argv[3]) : 0;
  const bool withLengths = argc > 4 ? std::atoi(argv[4]) != 0 : true;
  const std::string what = argc > 5 ? argv[5] : "lib,empty,stream";
  const int H = 32, HK = 8, D = 128;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double kvBytes = 2.0 * B * HK * double(L) * D * 2;
  const size_t cacheBytes = size_t(B) * HK * L * D * 2;
  const int copies = std::max(1, int((512.0 * 1048576 + kvBytes - 1) / kvBytes));
  std::vector<void *> ks(copies), vs(copies), qs(copies);
  for (int c = 0; c < copies; ++c) {
    CK(cudaMalloc(&ks[c], cacheBytes));
    CK(cudaMalloc(&vs[c], cacheBytes));
    CK(cudaMalloc(&qs[c], size_t(B) * H * D * 2));
    CK(cudaMemset(ks[c], 0x3c, cacheBytes));  // small positive bf16 values; timing only
    CK(cudaMemset(vs[c], 0x3c, cacheBytes));
    CK(cudaMemset(qs[c], 0x3c, size_t(B) * H * D * 2));
  }
  std::printf("SHAPE B%d L%d chunks %d lengths %d copies %d, %.1f MB\n", B, L, chunksArg, int(withLengths), copies,
              kvBytes / 1e6);

  if (what.find("lib") != std::string::npos) {
    flashAttnHandle_t h;
    FA(flashAttnCreate(&h));
    FA(flashAttnSetStream(h, stream));
    flashAttnTensorDescriptor_t qd, cd, od, ld;
    FA(flashAttnCreateTensorDescriptor(&qd));
    FA(flashAttnCreateTensorDescriptor(&cd));
    FA(flashAttnCreateTensorDescriptor(&od));
    FA(flashAttnCreateTensorDescriptor(&ld));
    const int64_t qdims[4] = {B, H, 1, D}, qstr[4] = {int64_t(H) * D, D, D, 1};
    const int64_t cdims[4] = {B, HK, L, D}, cstr[4] = {int64_t(HK) * L * D, int64_t(L) * D, D, 1};
    const int64_t ldims[3] = {B, H, 1}, lstr[3] = {H, 1, 1};
    FA(flashAttnSetTensorDescriptor(qd, FLASHATTN_DATA_BF16, 4, qdims, qstr));
    FA(flashAttnSetTensorDescriptor(od, FLASHATTN_DATA_BF16, 4, qdims, qstr));
    FA(flashAttnSetTensorDescriptor(cd, FLASHATTN_DATA_BF16, 4, cdims, cstr));
    FA(flashAttnSetTensorDescriptor(ld, FLASHATTN_DATA_FP32, 3, ldims, lstr));
    flashAttnAttentionDescriptor_t ad;
    FA(flashAttnCreateAttentionDescriptor(&ad));
    flashAttnSeqDescriptor_t sd = nullptr;
    int32_t *lens = nullptr;
    if (withLengths) {
      std::vector<int32_t> hl(B, L);
      CK(cudaMalloc(&lens, B * 4));
      CK(cudaMemcpy(lens, hl.data(), B * 4, cudaMemcpyHostToDevice));
      FA(flashAttnCreateSeqDescriptor(&sd));
      FA(flashAttnSetSeqKvLengths(sd, B, lens));
    }
    char desc[512];
    FA(flashAttnCheckSupport(h, FLASHATTN_OP_DECODE_CHUNK, ad, sd, qd, cd, cd, od, desc, sizeof desc, nullptr));
    std::printf("PLAN %s\n", desc);
    size_t ws = 0;
    FA(flashAttnDecodeChunkGetWorkspaceSize(h, ad, sd, qd, cd, cd, od, ld, chunksArg, &ws));
    void *wsp = nullptr, *o = nullptr;
    float *lse = nullptr;
    CK(cudaMalloc(&wsp, std::max<size_t>(ws, 256)));
    CK(cudaMalloc(&o, size_t(B) * H * D * 2));
    CK(cudaMalloc(&lse, size_t(B) * H * 4));
    auto call = [&](int i) {
      const int c = i % copies;
      FA(flashAttnDecodeChunk(h, ad, sd, qd, qs[c], cd, ks[c], cd, vs[c], od, o, ld, lse, chunksArg, wsp, ws));
    };
    int index = 0;
    const int e0 = index + 5;
    const double pc = perCall(call, index);
    const int e1 = index - 1;
    const double bb = backToBack(call, index);
    const int b1 = index - 1;
    const double gr = graphPerCall(call, index);
    CK(cudaStreamSynchronize(stream));
    std::printf("LIB per-call %.2f us (%.0f GB/s), back-to-back %.2f us (%.0f GB/s), graph %.2f us (%.0f GB/s)\n", pc,
                kvBytes / pc * 1e-3, bb, kvBytes / bb * 1e-3, gr, kvBytes / gr * 1e-3);
    // graph replays: 1 warm + 5 timed, 30 calls each, all after b1
    std::printf("RANGES events %d %d b2b %d %d graph %d %d\n", e0, e1, e1 + 1, b1, b1 + 31, b1 + 180);
    index = b1 + 181;
    const double host = hostTime(call, index);
    auto plan = [&](int) {
      size_t w = 0;
      FA(flashAttnDecodeChunkGetWorkspaceSize(h, ad, sd, qd, cd, cd, od, ld, chunksArg, &w));
    };
    const double planHost = hostTime(plan, index);
    std::printf("HOST flashAttnDecodeChunk %.2f us, GetWorkspaceSize %.2f us per call\n", host, planHost);
    // host time of one call, queued behind a spin (the stream never drains)
  }

  if (what.find("empty") != std::string::npos) {
    Big big{};
    const int blocks = 128;
    const int smemBytes = 3 * 32768 + 4096;
    CK(cudaFuncSetAttribute(emptyKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes));
    CK(cudaFuncSetAttribute(emptyKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (int cluster : {1, 16}) {
      auto call = [&](int) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(160);
        cfg.dynamicSmemBytes = smemBytes;
        cfg.stream = stream;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = cluster;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = cluster > 1 ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, emptyKernel, big));
      };
      int index = 0;
      const double pc = perCall(call, index), bb = backToBack(call, index), gr = graphPerCall(call, index);
      const double host = hostTime(call, index);
      std::printf("EMPTY cluster %d: per-call %.2f us, back-to-back %.2f us, graph %.2f us, host %.2f us\n", cluster, pc,
                  bb, gr, host);
    }
    // The same launch through the driver API (cuLaunchKernel on the runtime's handle of the kernel), to see what the
    // runtime's launch path adds.
    {
      void *entry = nullptr;
      cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
      CK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &entry, 12000, cudaEnableDefault, &found));
      using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);
      const auto launchKernel = reinterpret_cast<LaunchFn>(entry);
      cudaFunction_t fn = nullptr;
      CK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void *>(emptyKernel)));
      auto call = [&](int) {
        void *args[] = {&big};
        if (launchKernel(reinterpret_cast<CUfunction>(fn), blocks, 1, 1, 160, 1, 1, smemBytes, stream, args,
                         nullptr) != CUDA_SUCCESS) {
          std::fprintf(stderr, "cuLaunchKernel failed\n");
          std::exit(2);
        }
      };
      int index = 0;
      const double pc = perCall(call, index), bb = backToBack(call, index);
      std::printf("EMPTY driver API: per-call %.2f us, back-to-back %.2f us, host %.2f us\n", pc, bb,
                  hostTime(call, index));
      auto plain = [&](int) { emptyKernel<<<blocks, 160, smemBytes, stream>>>(big); };
      const double ppc = perCall(plain, index), pbb = backToBack(plain, index);
      std::printf("EMPTY <<<>>>: per-call %.2f us, back-to-back %.2f us, host %.2f us\n", ppc, pbb,
                  hostTime(plain, index));
    }
    auto none = [&](int) {};
    int index = 0;
    std::printf("EVENTS alone: %.2f us\n", perCall(none, index));
  }

  if (what.find("stream") != std::string::npos) {
    const int tiles = L / 64;
    for (int chunks : {16, 8, 32}) {
      const int blocks = B * HK * chunks;
      StreamParams sp{};
      sp.unitBytes = (long long)L * D * 2;
      sp.chunks = chunks;
      sp.tiles = tiles;
      CK(cudaMalloc(&sp.stamps, size_t(blocks) * 8 * 8));
      CK(cudaMemset(sp.stamps, 0, size_t(blocks) * 8 * 8));
      CK(cudaMalloc(&sp.sink, size_t(blocks) * 4));
      const int smemBytes = 3 * 32768;
      CK(cudaFuncSetAttribute(streamKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes));
      auto call = [&](int i) {
        StreamParams q = sp;
        q.k = static_cast<const unsigned char *>(ks[i % copies]);
        q.v = static_cast<const unsigned char *>(vs[i % copies]);
        streamKernel<<<blocks, 160, smemBytes, stream>>>(q);
        CK(cudaGetLastError());
      };
      int index = 0;
      const double pc = perCall(call, index);
      std::vector<unsigned long long> st(size_t(blocks) * 8);
      CK(cudaMemcpy(st.data(), sp.stamps, st.size() * 8, cudaMemcpyDeviceToHost));
      const double bb = backToBack(call, index), gr = graphPerCall(call, index);
      std::printf("STREAM host %.2f us\n", hostTime(call, index));
      std::printf("STREAM %d chunks (%d CTAs): per-call %.2f us (%.0f GB/s), back-to-back %.2f us (%.0f GB/s), graph "
                  "%.2f us (%.0f GB/s)\n",
                  chunks, blocks, pc, kvBytes / pc * 1e-3, bb, kvBytes / bb * 1e-3, gr, kvBytes / gr * 1e-3);
      char name[64];
      std::snprintf(name, sizeof name, "stream%d", chunks);
      printStamps(name, st, blocks);
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
