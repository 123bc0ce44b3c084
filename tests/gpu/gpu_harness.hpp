// SPDX-License-Identifier: BSD-3-Clause
// Device-side helpers shared by the GPU tests: buffers with one cudaMalloc each (so compute-sanitizer sees every
// overrun), upload/download of HostTensors, NaN poisoning, graph-capture replay, the sm90 device check and a status
// check that throws; built_instances.hpp says which kernel instances the build has.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "built_instances.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

namespace fa_test {

#define FA_CUDA_CHECK(expr)                                                                              \
  do {                                                                                                   \
    const cudaError_t fa_err_ = (expr);                                                                  \
    if (fa_err_ != cudaSuccess)                                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(fa_err_));                 \
  } while (0)

struct DeviceBuffer {
  void *ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) FA_CUDA_CHECK(cudaMalloc(&ptr, n));
  }
  DeviceBuffer(const void *host, size_t n) : DeviceBuffer(n) {
    if (n) FA_CUDA_CHECK(cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(const HostTensor &t) : DeviceBuffer(t.bytes.data(), t.bytes.size()) {}
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(DeviceBuffer &&o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; o.bytes = 0; }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  template <typename T = void>
  T *get() const { return static_cast<T *>(ptr); }
  // 0xFF bytes are NaN in FP16, BF16 and FP32: an element the kernel never writes fails the finiteness check.
  // 0xFF in every byte once it returns (a memset is asynchronous, and work on a non-blocking stream would not wait).
  void poison() {
    if (bytes) FA_CUDA_CHECK(cudaMemset(ptr, 0xFF, bytes));
    FA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void download(HostTensor &t) const { FA_CUDA_CHECK(cudaMemcpy(t.bytes.data(), ptr, t.bytes.size(), cudaMemcpyDeviceToHost)); }
  std::vector<uint8_t> raw() const {
    std::vector<uint8_t> out(bytes);
    if (bytes) FA_CUDA_CHECK(cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return out;
  }
};

// Throws with `what`, the status and the last error message unless `status` is FLASHATTN_STATUS_SUCCESS.
inline void check(flashAttnStatus_t status, const char *what) {
  if (status != FLASHATTN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + flashAttnGetErrorString(status) + ": " + fa_test::lastError());
}

// Whether the wgmma families run here: an sm90 device (compute capability 9.0), and FLASHATTN_KERNEL_FAMILIES not
// pinning the portable families (ctest runs every GPU suite a second time so pinned: the *_portable tests).
inline bool deviceIsSm90() {
  const char *families = std::getenv("FLASHATTN_KERNEL_FAMILIES");
  if (families != nullptr && std::string(families) == "portable") return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
  return major == 9 && minor == 0;
}

// Captures `enqueue` (which must launch on `stream`) into a graph and replays it once.
template <typename F>
void captureAndReplay(cudaStream_t stream, F &&enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  FA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  FA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// flashAttnForward captured into a graph on a non-blocking stream and replayed writes exactly the bytes of the eager
// call (O and LSE), for each storage type: a BSHD GQA problem with `mask` and `sq` query rows against 517 keys. A
// storage type without a forward instance of head dim 128 in this build is left out (all of them: the test skips).
inline void expectForwardGraphReplayBitwise(std::initializer_list<flashAttnDataType_t> types, int64_t sqRows,
                                            flashAttnMaskMode_t mask, uint64_t seed) {
  fa_test::Handle handle(FLASHATTN_BACKEND_CUDA);
  cudaStream_t stream = nullptr;
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_EQ(flashAttnSetStream(handle, stream), FLASHATTN_STATUS_SUCCESS);
  int checkedTypes = 0;
  for (flashAttnDataType_t t : types) {
    const int64_t b = 2, h = 4, kvh = 2, sq = sqRows, sk = 517, d = 128;
    if (!partBuiltAtLeast(Family::Forward, t, d)) continue;
    ++checkedTypes;
    std::mt19937_64 rng(seed);
    HostTensor tq = fa_test::pack4(fa_test::randomValues(rng, size_t(b * h * sq * d), t), t, b, h, sq, d,
                                   fa_test::Order::BSHD);
    HostTensor tk = fa_test::pack4(fa_test::randomValues(rng, size_t(b * kvh * sk * d), t), t, b, kvh, sk, d,
                                   fa_test::Order::BSHD);
    HostTensor tv = fa_test::pack4(fa_test::randomValues(rng, size_t(b * kvh * sk * d), t), t, b, kvh, sk, d,
                                   fa_test::Order::BSHD);
    HostTensor to(t, {b, h, sq, d}, fa_test::stridesFor(fa_test::Order::BSHD, b, h, sq, d));
    fa_test::TensorDesc dq(tq), dk(tk), dv(tv), dout(to), dlse;
    ASSERT_EQ(dlse.set(FLASHATTN_DATA_FP32, {b, h, sq}, {h * sq, sq, 1}), FLASHATTN_STATUS_SUCCESS);
    fa_test::AttnDesc attn;
    ASSERT_EQ(flashAttnSetAttentionMask(attn, mask), FLASHATTN_STATUS_SUCCESS);
    DeviceBuffer bq(tq), bk(tk), bv(tv), bo(to.bytes.size()), blse(size_t(b * h * sq) * 4);
    size_t workspaceBytes = 0;
    ASSERT_EQ(flashAttnForwardGetWorkspaceSize(handle, attn, nullptr, dq, dk, dv, dout, dlse, &workspaceBytes),
              FLASHATTN_STATUS_SUCCESS);
    DeviceBuffer workspace(workspaceBytes);
    auto forward = [&]() {
      return flashAttnForward(handle, attn, nullptr, dq, bq.ptr, dk, bk.ptr, dv, bv.ptr, dout, bo.ptr, dlse,
                              blse.get<float>(), workspace.ptr, workspaceBytes);
    };
    bo.poison();
    blse.poison();
    ASSERT_EQ(forward(), FLASHATTN_STATUS_SUCCESS) << fa_test::lastError();
    FA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<uint8_t> eagerO = bo.raw(), eagerLse = blse.raw();
    // The eager run must have written every element (O and LSE start NaN-poisoned), or the bitwise comparison below
    // would accept a replay that writes nothing either.
    for (int64_t i = 0; i < int64_t(eagerO.size() / fa_test::elementSize(t)); ++i)
      ASSERT_TRUE(std::isfinite(fa_test::loadElement(eagerO.data(), t, i)))
          << fa_test::typeName(t) << ": eager O[" << i << "] is not finite";
    for (size_t i = 0; i < eagerLse.size() / 4; ++i) {
      float lse;
      std::memcpy(&lse, eagerLse.data() + i * 4, 4);
      ASSERT_TRUE(std::isfinite(lse)) << fa_test::typeName(t) << ": eager LSE[" << i << "] is not finite";
    }
    bo.poison();
    blse.poison();
    flashAttnStatus_t captured = FLASHATTN_STATUS_INTERNAL_ERROR;
    fa_test::captureAndReplay(stream, [&]() { captured = forward(); });
    ASSERT_EQ(captured, FLASHATTN_STATUS_SUCCESS) << fa_test::lastError();
    EXPECT_TRUE(bo.raw() == eagerO) << "graph replay O differs from eager";
    EXPECT_TRUE(blse.raw() == eagerLse) << "graph replay LSE differs from eager";
  }
  flashAttnSetStream(handle, nullptr);
  cudaStreamDestroy(stream);
  if (checkedTypes == 0) GTEST_SKIP() << "no storage type with a forward instance of head dim 128: " << kNotInThisBuild;
}

// Random ALiBi slopes in [0.01, 0.5), `count` of them ([heads] or [batch, heads]), as the device buffer takes them;
// the oracle's copy goes into p.alibi.
inline std::vector<float> randomAlibiSlopes(std::mt19937_64 &rng, int64_t count, fa_ref::Problem &p) {
  std::vector<float> slopes;
  std::uniform_real_distribution<double> u(0.01, 0.5);
  for (int64_t i = 0; i < count; ++i) {
    slopes.push_back(float(u(rng)));
    p.alibi.push_back(double(slopes.back()));
  }
  return slopes;
}

// fa_ref::forward over independent (sequence, KV head) groups on all host cores: the long caches and prefixes of the
// GPU grids would take minutes on one. Each group is the same oracle on a slice of the inputs (canonical dense
// layouts of fa_ref::Problem), with the sequence's own query and key counts.
inline void referenceForwardByKvGroup(const fa_ref::Problem &p, const std::vector<double> &q,
                                      const std::vector<double> &k, const std::vector<double> &v,
                                      std::vector<double> &o, std::vector<double> &lse, fa_ref::Rounding r) {
  o.assign(p.oSize(), 0.0);
  lse.assign(p.lseSize(), -INFINITY);
  const int64_t groups = p.batch * p.kvHeads, G = p.heads / p.kvHeads;
  const size_t qRows = size_t(p.maxSq * p.headDim), kRows = size_t(p.maxSk * p.headDim);
  const size_t oRows = size_t(p.maxSq * p.headDimV), vRows = size_t(p.maxSk * p.headDimV);
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t gi = next++; gi < groups; gi = next++) {
      const int64_t b = gi / p.kvHeads, kvh = gi % p.kvHeads;
      fa_ref::Problem sp = p;
      sp.batch = 1, sp.heads = G, sp.kvHeads = 1;
      sp.sq = {p.seqQ(b)};
      sp.sk = {p.seqK(b)};
      sp.alibi.clear();
      for (int64_t h = 0; h < G && !p.alibi.empty(); ++h) sp.alibi.push_back(p.alibiSlope(b, kvh * G + h));
      sp.sinks.clear();
      for (int64_t h = 0; h < G && !p.sinks.empty(); ++h) sp.sinks.push_back(p.sinks[size_t(kvh * G + h)]);
      const size_t q0 = size_t(b * p.heads + kvh * G) * qRows;
      const size_t k0 = size_t(b * p.kvHeads + kvh) * kRows, v0 = size_t(b * p.kvHeads + kvh) * vRows;
      const size_t o0 = size_t(b * p.heads + kvh * G) * oRows;
      const std::vector<double> qs(q.begin() + q0, q.begin() + q0 + size_t(G) * qRows);
      const std::vector<double> ks(k.begin() + k0, k.begin() + k0 + kRows);
      const std::vector<double> vs(v.begin() + v0, v.begin() + v0 + vRows);
      std::vector<double> os, ls;
      fa_ref::forward(sp, qs, ks, vs, os, ls, r);
      std::copy(os.begin(), os.end(), o.begin() + o0);
      std::copy(ls.begin(), ls.end(), lse.begin() + size_t(b * p.heads + kvh * G) * size_t(p.maxSq));
    }
  };
  std::vector<std::thread> pool;
  const unsigned n = std::max(1u, std::min(std::thread::hardware_concurrency(), 32u));
  for (unsigned i = 0; i < n; ++i) pool.emplace_back(worker);
  for (auto &t : pool) t.join();
}

}  // namespace fa_test
