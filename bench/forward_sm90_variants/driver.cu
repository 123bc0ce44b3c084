// SPDX-License-Identifier: BSD-3-Clause
// Times forward_sm90 kernel configurations (variants_d*.cu) side by side on the prefill sweep (bf16, dense BHSD,
// batch = 16384 / S, heads = 2048 / D; GQA 32/8 rows at D128), each with one CTA per tile and persistent, in
// interleaved rounds, and checks every configuration: a few rows against a float64 reference on the host, the whole
// output against the first configuration of its head dim (bitwise where the tiles are the same).
//   driver [--dims 64,96,128,192,256] [--seqs 512,...] [--rounds 2] [--iters 20] [--causal 0|1|2(both)]
// Prints one line per (shape, configuration, schedule): TFLOP/s (median per-launch event time, best round), its ratio
// to the first configuration's one-CTA-per-tile figure, and the errors.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "variants.hpp"

namespace {

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

std::vector<int> parseList(const char *text) {
  std::vector<int> out;
  for (const char *p = text; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

float bf16ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

// Normal(0, 1) values from a hash of (seed, index) by Box-Muller: fresh inputs per shape without host time.
__global__ void fillNormal(__nv_bfloat16 *x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (uint64_t(i) + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
    const float u1 = (float(h & 0xffffffu) + 1.f) / 16777217.f;
    const float u2 = float((h >> 32) & 0xffffffu) / 16777216.f;
    x[i] = __float2bfloat16(sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

// max |a - b| over n elements, NaN counted as infinity, into *out (as float bits: non-negative floats order as ints).
__global__ void maxAbsDiff(const __nv_bfloat16 *a, const __nv_bfloat16 *b, int64_t n, unsigned *out) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float d = fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i]));
    m = fmaxf(m, d != d ? INFINITY : d);
  }
  atomicMax(out, __float_as_uint(m));
}

struct Shape {
  int d, s, heads, kvHeads, batch;
  bool causal;
};

}  // namespace

int main(int argc, char **argv) {
  std::vector<int> dims = {64, 96, 128, 192, 256};
  std::vector<int> seqs = {512, 1024, 2048, 4096, 8192, 16384};
  int rounds = 2, iters = 20, causalSel = 2;
  bool gqa = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dims") dims = parseList(argv[i + 1]);
    else if (a == "--seqs") seqs = parseList(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--causal") causalSel = std::atoi(argv[i + 1]);
    else if (a == "--gqa") gqa = std::atoi(argv[i + 1]) != 0;
  }
  std::vector<variants::Variant> all;
  variants::addD64(all);
  variants::addD128(all);
  variants::addD192(all);
  variants::addD256(all);

  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  std::vector<Shape> shapes;
  for (int d : dims)
    for (int s : seqs)
      for (int c = 0; c < 2; ++c) {
        if ((causalSel == 0 && c == 1) || (causalSel == 1 && c == 0)) continue;
        shapes.push_back({d, s, 2048 / d, 2048 / d, std::max(1, 16384 / s), c == 1});
        if (gqa && d == 128) shapes.push_back({d, s, 32, 8, std::max(1, 16384 / s), c == 1});
      }

  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::mt19937_64 rng(12345);
  std::printf("%-5s %-6s %-4s %-6s %-24s %-5s %8s %7s %10s %10s\n", "D", "S", "H/K", "mask", "variant", "sched",
              "TFLOP/s", "x first", "max|d-ref|", "max|d-v0|");
  for (const Shape &sh : shapes) {
    std::vector<const variants::Variant *> vs;
    for (const auto &v : all)
      if (v.headDim == sh.d) vs.push_back(&v);
    if (vs.empty()) continue;
    const int64_t qElems = int64_t(sh.batch) * sh.heads * sh.s * sh.d;
    const int64_t kElems = int64_t(sh.batch) * sh.kvHeads * sh.s * sh.d;
    std::vector<__nv_bfloat16> hq(qElems), hk(kElems), hv(kElems);
    __nv_bfloat16 *q, *k, *v, *o, *o0;
    float *lse;
    CHECK(cudaMalloc(&q, qElems * 2));
    CHECK(cudaMalloc(&k, kElems * 2));
    CHECK(cudaMalloc(&v, kElems * 2));
    CHECK(cudaMalloc(&o, qElems * 2));
    CHECK(cudaMalloc(&o0, qElems * 2));
    CHECK(cudaMalloc(&lse, int64_t(sh.batch) * sh.heads * sh.s * 4));
    unsigned *diff;
    CHECK(cudaMalloc(&diff, sizeof(unsigned)));
    fillNormal<<<1024, 256>>>(q, qElems, rng());
    fillNormal<<<1024, 256>>>(k, kElems, rng());
    fillNormal<<<1024, 256>>>(v, kElems, rng());
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hq.data(), q, qElems * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hk.data(), k, kElems * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hv.data(), v, kElems * 2, cudaMemcpyDeviceToHost));

    variants::ForwardParams p;
    p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
    p.qRow = sh.d, p.qHead = int64_t(sh.s) * sh.d, p.qBatch = p.qHead * sh.heads;
    p.kRow = sh.d, p.kHead = int64_t(sh.s) * sh.d, p.kBatch = p.kHead * sh.kvHeads;
    p.vRow = p.kRow, p.vHead = p.kHead, p.vBatch = p.kBatch;
    p.oRow = p.qRow, p.oHead = p.qHead, p.oBatch = p.qBatch;
    p.lseRow = 1, p.lseHead = sh.s, p.lseBatch = int64_t(sh.s) * sh.heads;
    p.batch = sh.batch, p.heads = sh.heads, p.headsPerKvHead = sh.heads / sh.kvHeads;
    p.seqQ = sh.s, p.seqK = sh.s, p.headDim = sh.d, p.headDimV = sh.d;
    p.scale = 1.f / std::sqrt(float(sh.d));
    p.mask = sh.causal ? 1 : 0;  // Mask::CausalTopLeft
    p.vectorAccess = true;
    const double flops = 4.0 * sh.batch * sh.heads * double(sh.s) * sh.s * sh.d * (sh.causal ? 0.5 : 1.0);

    // float64 reference of a few rows of (batch 0, head 0) and of the last (batch, head).
    const int refRows[] = {0, 1, sh.s / 2, sh.s - 1};
    const int refPairs[][2] = {{0, 0}, {sh.batch - 1, sh.heads - 1}};
    std::vector<std::vector<double>> ref;
    for (auto &bh : refPairs)
      for (int r : refRows) {
        const int b = bh[0], h = bh[1], kh = h / (sh.heads / sh.kvHeads);
        const __nv_bfloat16 *qr = hq.data() + b * p.qBatch + h * p.qHead + int64_t(r) * sh.d;
        const int keys = sh.causal ? r + 1 : sh.s;
        std::vector<double> logits(keys);
        double mx = -1e300;
        for (int j = 0; j < keys; ++j) {
          const __nv_bfloat16 *kr = hk.data() + b * p.kBatch + kh * p.kHead + int64_t(j) * sh.d;
          double dot = 0;
          for (int c = 0; c < sh.d; ++c) dot += double(bf16ToFloat(qr[c])) * bf16ToFloat(kr[c]);
          logits[j] = dot * p.scale;
          mx = std::max(mx, logits[j]);
        }
        double sum = 0;
        std::vector<double> out(sh.d, 0.0);
        for (int j = 0; j < keys; ++j) {
          const double w = std::exp(logits[j] - mx);
          sum += w;
          const __nv_bfloat16 *vr = hv.data() + b * p.vBatch + kh * p.vHead + int64_t(j) * sh.d;
          for (int c = 0; c < sh.d; ++c) out[c] += w * bf16ToFloat(vr[c]);
        }
        for (double &x : out) x /= sum;
        ref.push_back(out);
      }

    std::vector<__nv_bfloat16> hout(qElems);
    std::vector<std::vector<float>> best(vs.size(), std::vector<float>(2, 1e30f));
    std::vector<double> refErr(vs.size(), 0.0), v0Err(vs.size(), 0.0);
    std::vector<bool> failed(vs.size(), false);
    for (int round = 0; round < rounds; ++round)
      for (size_t vi = 0; vi < vs.size(); ++vi)
        for (int persistent = 0; persistent < 2; ++persistent) {
          if (failed[vi]) continue;
          variants::LaunchOptions options;
          options.persistent = persistent == 1;
          options.numSMs = prop.multiProcessorCount;
          options.l2Bytes = size_t(prop.l2CacheSize);
          options.tma = vs[vi]->tma;
          p.o = o;
          CHECK(cudaMemsetAsync(o, 0xff, qElems * 2, stream));  // NaN: an unwritten element fails the checks
          cudaError_t err = vs[vi]->launch(p, options, device, stream);
          if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
          if (err != cudaSuccess) {
            std::printf("%-5d %-6d %2d/%-2d %-6s %-24s launch failed: %s\n", sh.d, sh.s, sh.heads, sh.kvHeads,
                        sh.causal ? "causal" : "none", vs[vi]->name, cudaGetErrorString(err));
            failed[vi] = true;
            cudaGetLastError();
            continue;
          }
          if (round == 0) {
            CHECK(cudaMemcpy(hout.data(), o, qElems * 2, cudaMemcpyDeviceToHost));
            if (vi == 0 && persistent == 0) CHECK(cudaMemcpy(o0, o, qElems * 2, cudaMemcpyDeviceToDevice));
            CHECK(cudaMemset(diff, 0, sizeof(unsigned)));
            maxAbsDiff<<<1024, 256>>>(o, o0, qElems, diff);
            unsigned bits = 0;
            CHECK(cudaMemcpy(&bits, diff, sizeof(unsigned), cudaMemcpyDeviceToHost));
            float e0f;
            std::memcpy(&e0f, &bits, sizeof(float));
            const double e0 = e0f;
            double er = 0;
            int idx = 0;
            for (auto &bh : refPairs)
              for (int r : refRows) {
                const __nv_bfloat16 *orow = hout.data() + bh[0] * p.oBatch + bh[1] * p.oHead + int64_t(r) * sh.d;
                for (int c = 0; c < sh.d; ++c) {
                  const double x = bf16ToFloat(orow[c]);
                  er = std::isnan(x) ? INFINITY : std::max(er, std::fabs(x - ref[idx][c]));
                }
                ++idx;
              }
            refErr[vi] = std::max(refErr[vi], er);
            v0Err[vi] = std::max(v0Err[vi], e0);
          }
          for (int w = 0; w < 2; ++w) CHECK(vs[vi]->launch(p, options, device, stream));
          std::vector<float> times;
          for (int it = 0; it < iters; ++it) {
            CHECK(cudaEventRecord(start, stream));
            CHECK(vs[vi]->launch(p, options, device, stream));
            CHECK(cudaEventRecord(stop, stream));
            CHECK(cudaEventSynchronize(stop));
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, start, stop));
            times.push_back(ms);
          }
          std::sort(times.begin(), times.end());
          best[vi][persistent] = std::min(best[vi][persistent], times[times.size() / 2]);
        }
    const double baseTflops = flops / (best[0][0] * 1e-3) / 1e12;
    for (size_t vi = 0; vi < vs.size(); ++vi) {
      if (failed[vi]) continue;
      for (int persistent = 0; persistent < 2; ++persistent) {
        const double tflops = flops / (best[vi][persistent] * 1e-3) / 1e12;
        std::printf("%-5d %-6d %2d/%-2d %-6s %-24s %-5s %8.1f %7.3f %10.2e %10.2e\n", sh.d, sh.s, sh.heads,
                    sh.kvHeads, sh.causal ? "causal" : "none", vs[vi]->name, persistent ? "pers" : "tile", tflops,
                    tflops / baseTflops, refErr[vi], v0Err[vi]);
      }
    }
    std::fflush(stdout);
    CHECK(cudaFree(q));
    CHECK(cudaFree(k));
    CHECK(cudaFree(v));
    CHECK(cudaFree(o));
    CHECK(cudaFree(o0));
    CHECK(cudaFree(lse));
    CHECK(cudaFree(diff));
  }
  return 0;
}
