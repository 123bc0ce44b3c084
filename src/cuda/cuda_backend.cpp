// SPDX-License-Identifier: BSD-3-Clause
// The CUDA backend frame: device detection at handle creation, the stream, and the hand-off to the kernel families:
// plan() is the operation's chooser (src/cuda/family.hpp), and a run launches exactly the family its plan names.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "cuda/family.hpp"
#include "cuda/ops.hpp"
#include "cuda/staging/staging.hpp"

namespace flashattn {

namespace {

constexpr int kOldestArch = 80;

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

// The static CUDA runtime reports a machine without the driver library as cudaErrorInsufficientDriver ("driver
// version is insufficient"), which sends users to upgrade a driver they do not have: look for libcuda first.
bool driverLibraryLoadable() {
  void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return false;
  dlclose(lib);
  return true;
}

cuda::DeviceInfo probeCurrentDevice() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // the probe's failure is ours, not the caller's
    if (!driverLibraryLoadable())
      fail(FLASHATTN_STATUS_NO_DEVICE, "no NVIDIA driver (libcuda.so.1 not found): the CUDA backend needs the NVIDIA "
                                       "driver; the HOST backend runs without it");
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
  info.portableCodeArch = cuda::portableCodeArch();
  if (info.arch() < kOldestArch)
    fail(FLASHATTN_STATUS_ARCH_MISMATCH, "device ", info.device, " (", info.name, ") is sm_", info.arch(),
         ": libflashattn needs sm_80 or newer");
  return info;
}

// The kernels fold scale * log2(e), softcap * log2(e) and scale / softcap (times 2 log2(e) in the Hopper kernels'
// tanh) into FP32 constants once per launch and compute every logit from them (exp2 of fmaf(dot, scale * log2 e,
// -max)). Where one of those constants is not a finite float (scale above FLT_MAX / log2 e ~ 2.36e38, or
// scale / softcap past FLT_MAX / (2 log2 e) for a tiny softcap), a zero
// dot product gives 0 * inf = NaN and every other logit +-inf: no kernel can serve the problem, so it is refused
// rather than answered with NaN. The HOST backend computes in double and serves these scales.
void requireFiniteLogitConstants(float scale, float softcap) {
  constexpr float kLog2e = 1.4426950408889634f;
  const auto finite = [](float x) { return std::isfinite(x); };
  if (!finite(scale * kLog2e))
    fail(FLASHATTN_STATUS_NOT_SUPPORTED, "scale ", scale,
         ": the CUDA kernels fold scale * log2(e) into an FP32 constant, which is infinite above ~2.36e38 "
         "(fold part of the scale into Q, or use the HOST backend)");
  if (softcap > 0.f && (!finite(softcap * kLog2e) || !finite(scale / softcap * (2.f * kLog2e))))
    fail(FLASHATTN_STATUS_NOT_SUPPORTED, "softcap ", softcap, " with scale ", scale,
         ": the CUDA kernels fold softcap * log2(e) and scale / softcap into FP32 constants, and one of them is "
         "infinite (use the HOST backend)");
}

// The last few plans of this thread. A decode loop asks for the plan of the same problem every step, and planning it
// (staging, the chooser, tensor-map trials, the description) is host time that the caller pays on every call. A plan
// is a pure function of the device and the normalized problem (the knobs are read once per process), so only a
// problem equal in every field on the same device reuses one; the builder's checks and every pointer check still run
// on each call. Per thread, so no lock.
class PlanCache {
 public:
  const Plan *find(int device, const AttnProblem &p) const {
    for (const Entry &e : entries_)
      if (e.device == device && e.problem == p) return &e.plan;
    return nullptr;
  }
  void insert(int device, const AttnProblem &p, const Plan &plan) {
    Entry &e = entries_[next_];
    next_ = (next_ + 1) % kEntries;
    e.device = device;
    e.problem = p;
    e.plan = plan;
  }

 private:
  struct Entry {
    int device = -1;  // never a device: an empty entry matches nothing
    AttnProblem problem;
    Plan plan;
  };
  static constexpr int kEntries = 8;
  Entry entries_[kEntries];
  int next_ = 0;
};

PlanCache &planCache() {
  thread_local PlanCache cache;
  return cache;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const cuda::DeviceInfo &dev) : dev_(dev) {}

  flashAttnBackend_t kind() const override { return FLASHATTN_BACKEND_CUDA; }
  void setStream(CUstream_st *stream) override { stream_ = stream; }
  CUstream_st *stream() const override { return stream_; }

  Plan plan(const AttnProblem &p) const override {
    if (const Plan *cached = planCache().find(dev_.device, p)) return *cached;
    Plan plan = planUncached(p);
    planCache().insert(dev_.device, p, plan);
    return plan;
  }

  // The chooser's plan of the problem the kernels see: tensors whose strides their 16-byte loads cannot serve are
  // staged through the workspace (src/cuda/staging), in slots ahead of the family's own regions.
  Plan planUncached(const AttnProblem &p) const {
    if (p.op == Op::MergeStates) fail(FLASHATTN_STATUS_INTERNAL_ERROR, "merge planned as an attention problem");
    requireFiniteLogitConstants(p.scale, p.softcap);
    const cuda::StagingPlan staging = stagingOf(p);
    if (!staging.addressable)
      fail(FLASHATTN_STATUS_NOT_SUPPORTED, "the packed copy of a tensor this call must stage through the workspace ",
           "would span 2^62 bytes or more");
    Plan plan;
    std::string whyNot;
    if (!cuda::choose(dev_, cuda::restage(p, staging), &plan, &whyNot)) fail(FLASHATTN_STATUS_NOT_SUPPORTED, whyNot);
    if (staging.totalBytes > 0) {
      for (WorkspaceRegion &r : plan.regions)
        if (r.name != nullptr) r.offset += staging.totalBytes;
      plan.workspaceBytes += staging.totalBytes;
      plan.stagingBytes = staging.totalBytes;
      const std::string staged = cuda::describeStaging(staging);
      if (!staged.empty()) plan.description += "; staged through the workspace: " + staged;
    }
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
    run("forward kernel launch", p, plan, buf, workspace);
  }
  void backward(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    run("backward kernel launch", p, plan, buf, workspace);
  }
  void decode(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    run("decode kernel launch", p, plan, buf, workspace);
  }
  void merge(const MergeProblem &m, const Plan &plan, const MergeBuffers &buf, void *workspace) override {
    DeviceScope scope(dev_.device);
    check("merge kernel launch", cuda::launchMerge(dev_, m, plan, buf, workspace, stream_));
  }

 private:
  static cuda::StagingPlan stagingOf(const AttnProblem &p) { return cuda::planStaging(p, cuda::kNoStagedRoom); }

  void run(const char *what, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) {
    const cuda::Family *family = cuda::findFamily(plan.kernel);
    if (family == nullptr || family->op != p.op)
      fail(FLASHATTN_STATUS_INTERNAL_ERROR, "the plan names kernel ", kernelIdName(plan.kernel),
           ", which does not serve this operation in this build");
    DeviceScope scope(dev_.device);
    if (plan.stagingBytes == 0) {
      check(what, family->launch(dev_, p, plan, buf, workspace, stream_));
      return;
    }
    const cuda::StagingPlan staging = stagingOf(p);
    AttnBuffers kernelBuffers;
    check("staging copy in", cuda::stageIn(staging, p, buf, workspace, &kernelBuffers, stream_));
    check(what, family->launch(dev_, cuda::restage(p, staging, buf), plan, kernelBuffers, workspace, stream_));
    check("staging copy out", cuda::stageOut(staging, p, buf, workspace, stream_));
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
