// The CUDA backend frame: device detection at handle creation, the stream, the layout rules every CUDA kernel shares,
// and dispatch to the kernel families through src/cuda/ops.hpp (each family's chooser is its plan function).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "core/host_phases.hpp"
#include "cuda/ops.hpp"

namespace flashattn {

namespace {

constexpr int kOldestArch = 80;
// Every CUDA kernel moves rows in 16-byte vectors.
constexpr std::size_t kVectorBytes = 16;

[[noreturn]] void failCuda(flashAttnStatus_t status, const char *what, cudaError_t err) {
  fail(status, what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

// Makes the handle's device current for the duration of a call, and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      const cudaError_t err = cudaSetDevice(device);
      if (err != cudaSuccess) failCuda(FLASHATTN_STATUS_EXECUTION_FAILED, "cudaSetDevice", err);
    }
  }
  ~DeviceScope() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;

 private:
  int previous_ = -1;
};

cuda::DeviceInfo probeCurrentDevice() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // the probe's failure is ours, not the caller's
    failCuda(FLASHATTN_STATUS_NO_DEVICE, "no usable CUDA driver or GPU (cudaGetDeviceCount)", err);
  }
  if (count == 0) fail(FLASHATTN_STATUS_NO_DEVICE, "no CUDA GPU is present (cudaGetDeviceCount returned 0)");
  cuda::DeviceInfo info;
  err = cudaGetDevice(&info.device);
  if (err != cudaSuccess) failCuda(FLASHATTN_STATUS_NO_DEVICE, "cudaGetDevice", err);
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, info.device);
  if (err != cudaSuccess) failCuda(FLASHATTN_STATUS_NO_DEVICE, "cudaGetDeviceProperties", err);
  info.ccMajor = prop.major;
  info.ccMinor = prop.minor;
  info.numSMs = prop.multiProcessorCount;
  info.smemPerBlockOptin = prop.sharedMemPerBlockOptin;
  info.l2Bytes = std::size_t(prop.l2CacheSize);
  info.maxThreadsPerSM = prop.maxThreadsPerMultiProcessor;
  std::snprintf(info.name, sizeof info.name, "%s", prop.name);
  if (info.arch() < kOldestArch)
    fail(FLASHATTN_STATUS_ARCH_MISMATCH, "device ", info.device, " (", info.name, ") is sm_", info.arch(),
         ": libflashattn needs sm_80 or newer");
  return info;
}

struct StrideRule {
  const char *tensor;
  const Layout &layout;
  std::size_t elementBytes;
  bool batchUsed, headUsed, rowUsed;
};

void requireVectorStrides(std::initializer_list<StrideRule> rules) {
  for (const StrideRule &r : rules) {
    const int64_t perVector = int64_t(kVectorBytes / r.elementBytes);
    const struct {
      const char *name;
      int64_t stride;
      bool used;
    } strides[] = {{"batch", r.layout.batch, r.batchUsed}, {"head", r.layout.head, r.headUsed},
                   {"row", r.layout.row, r.rowUsed}};
    for (const auto &s : strides)
      if (s.used && s.stride % perVector != 0)
        fail(FLASHATTN_STATUS_NOT_SUPPORTED, r.tensor, " ", s.name, " stride is ", s.stride,
             " elements, not a multiple of ", perVector, ": the CUDA kernels move rows in 16-byte vectors");
  }
}

// The kernels fold scale * log2(e), softcap * log2(e) and scale / softcap into FP32 constants once per launch and
// compute every logit from them (exp2 of fmaf(dot, scale * log2 e, -max)). Where one of those constants is not a
// finite float (scale above FLT_MAX / log2 e ~ 2.36e38, or scale / softcap past FLT_MAX for a tiny softcap), a zero
// dot product gives 0 * inf = NaN and every other logit +-inf: no kernel can serve the problem, so it is refused
// rather than answered with NaN. The HOST backend computes in double and serves these scales.
void requireFiniteLogitConstants(float scale, float softcap) {
  constexpr float kLog2e = 1.4426950408889634f;
  const auto finite = [](float x) { return std::isfinite(x); };
  if (!finite(scale * kLog2e))
    fail(FLASHATTN_STATUS_NOT_SUPPORTED, "scale ", scale,
         ": the CUDA kernels fold scale * log2(e) into an FP32 constant, which is infinite above ~2.36e38 "
         "(fold part of the scale into Q, or use the HOST backend)");
  if (softcap > 0.f && (!finite(softcap * kLog2e) || !finite(scale / softcap)))
    fail(FLASHATTN_STATUS_NOT_SUPPORTED, "softcap ", softcap, " with scale ", scale,
         ": the CUDA kernels fold softcap * log2(e) and scale / softcap into FP32 constants, and one of them is "
         "infinite (use the HOST backend)");
}

void requireVectorAligned(const char *name, const void *ptr) {
  if (ptr && reinterpret_cast<uintptr_t>(ptr) % kVectorBytes != 0)
    fail(FLASHATTN_STATUS_NOT_SUPPORTED, name, " pointer ", ptr,
         " is not 16-byte aligned: the CUDA kernels move rows in 16-byte vectors");
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const cuda::DeviceInfo &dev) : dev_(dev) {}

  flashAttnBackend_t kind() const override { return FLASHATTN_BACKEND_CUDA; }
  void setStream(CUstream_st *stream) override { stream_ = stream; }
  CUstream_st *stream() const override { return stream_; }

  Plan plan(const AttnProblem &p) const override {
    requireFiniteLogitConstants(p.scale, p.softcap);
    const std::size_t e = dtypeSize(p.dtype);
    const bool batchUsed = !p.ragged && p.batch > 1;
    // The forward kernels fall back to element loads for unaligned rows themselves; the other families move rows in
    // 16-byte vectors only. Paged caches: Layout.batch is the page stride and always used.
    if (p.op != Op::Forward)
      requireVectorStrides({{"Q", p.q, e, batchUsed, p.heads > 1, true},
                          {"K", p.k, e, batchUsed || p.paged, p.kvHeads > 1, true},
                          {"V", p.v, e, batchUsed || p.paged, p.kvHeads > 1, true},
                          {"O", p.o, e, batchUsed, p.heads > 1, true}});
    if (p.op == Op::Backward)
      requireVectorStrides({{"dO", p.dO, e, batchUsed, p.heads > 1, true},
                            {"dQ", p.dQ, e, batchUsed, p.heads > 1, true},
                            {"dK", p.dK, e, batchUsed, p.kvHeads > 1, true},
                            {"dV", p.dV, e, batchUsed, p.kvHeads > 1, true}});
    Plan plan;
    std::string whyNot;
    bool served = false;
    switch (p.op) {
      case Op::Forward: served = cuda::planForward(dev_, p, &plan, &whyNot); break;
      case Op::Backward: served = cuda::planBackward(dev_, p, &plan, &whyNot); break;
      case Op::DecodeChunk: served = cuda::planDecode(dev_, p, &plan, &whyNot); break;
      case Op::MergeStates: fail(FLASHATTN_STATUS_INTERNAL_ERROR, "merge planned as an attention problem");
    }
    if (!served) fail(FLASHATTN_STATUS_NOT_SUPPORTED, whyNot.empty() ? "no CUDA kernel serves this problem" : whyNot);
    return plan;
  }

  // The merge kernel picks float4 or scalar loads per call from the strides and pointers itself.
  Plan planMerge(const MergeProblem &m) const override {
    Plan plan;
    std::string whyNot;
    if (!cuda::planMerge(dev_, m, &plan, &whyNot))
      fail(FLASHATTN_STATUS_NOT_SUPPORTED, whyNot.empty() ? "no CUDA kernel serves this merge" : whyNot);
    return plan;
  }

  void forward(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    DeviceScope scope(dev_.device);
    check("forward kernel launch", cuda::launchForward(dev_, p, plan, buf, workspace, stream_));
  }
  void backward(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    requireAligned(buf);
    DeviceScope scope(dev_.device);
    check("backward kernel launch", cuda::launchBackward(dev_, p, plan, buf, workspace, stream_));
  }
  void decode(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    requireAligned(buf);
    DeviceScope scope(dev_.device);
    FLASHATTN_HOST_PHASE(5);
    check("decode kernel launch", cuda::launchDecode(dev_, p, plan, buf, workspace, stream_));
    FLASHATTN_HOST_PHASE(8);
  }
  void merge(const MergeProblem &m, const Plan &plan, const MergeBuffers &buf, void *workspace) override {
    DeviceScope scope(dev_.device);
    check("merge kernel launch", cuda::launchMerge(dev_, m, plan, buf, workspace, stream_));
  }

 private:
  static void requireAligned(const AttnBuffers &buf) {
    requireVectorAligned("Q", buf.q);
    requireVectorAligned("K", buf.k);
    requireVectorAligned("V", buf.v);
    requireVectorAligned("O", buf.o);
    requireVectorAligned("dO", buf.dO);
    requireVectorAligned("dQ", buf.dQ);
    requireVectorAligned("dK", buf.dK);
    requireVectorAligned("dV", buf.dV);
  }
  static void check(const char *what, cudaError_t err) {
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear a non-sticky launch error so the caller's next CUDA call does not inherit it
      failCuda(FLASHATTN_STATUS_EXECUTION_FAILED, what, err);
    }
  }

  cuda::DeviceInfo dev_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> makeCudaBackend() { return std::make_unique<CudaBackend>(probeCurrentDevice()); }

bool cudaBackendAvailable() {
  try {
    probeCurrentDevice();
    return true;
  } catch (const Error &) {
    return false;
  }
}

}  // namespace flashattn
