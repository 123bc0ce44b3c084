// SPDX-License-Identifier: BSD-3-Clause
// The HOST backend: the whole API on host pointers, synchronously, as the reference the CUDA kernels are held to.
#include <memory>
#include <string>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "host/host_attention.hpp"

namespace flashattn {
namespace {

const char *opName(Op op) {
  switch (op) {
    case Op::Forward: return "forward";
    case Op::Backward: return "backward";
    case Op::DecodeChunk: return "decode";
    case Op::MergeStates: return "merge";
  }
  return "unknown";
}

const char *storageName(DType t) {
  switch (t) {
    case DType::FP16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::FP32: return "fp32";
  }
  return "unknown";
}

class HostBackend final : public Backend {
 public:
  flashAttnBackend_t kind() const override { return FLASHATTN_BACKEND_HOST; }
  // Kept and returned, never used: code written for either backend sets its stream unconditionally (AUTO may give a
  // HOST handle), and GetStream must then return what was set rather than a NULL it never asked for.
  void setStream(CUstream_st *stream) override { stream_ = stream; }
  CUstream_st *stream() const override { return stream_; }

  // No text here: a plan is made for every call, and the HOST operations allocate nothing per call (the description
  // is built by describe(), for flashAttnCheckSupport() only).
  Plan plan(const AttnProblem &p) const override {
    if (p.op == Op::Backward && p.paged)
      fail(FLASHATTN_STATUS_NOT_SUPPORTED,
           "backward with a paged KV cache: dK/dV of pages that sequences share "
           "have no defined layout; use dense or ragged K/V for backward");
    if (p.op == Op::MergeStates)
      fail(FLASHATTN_STATUS_INTERNAL_ERROR, "host plan() asked for a merge: planMerge() serves merges");
    Plan plan;
    plan.kernel = KernelId::HostReference;
    plan.deterministic = true;
    if (decodeRunsAsForward(p)) {
      plan.numChunks = 1;  // the forward's one pass over the keys, as the CUDA backend runs it
    } else if (p.op == Op::DecodeChunk) {
      plan.numChunks = host::decodeChunkCount(p);
      plan.workspaceBytes = host::decodeWorkspace(p, plan.numChunks).totalBytes;
    } else if (p.op == Op::Backward) {
      plan.workspaceBytes = host::backwardWorkspaceBytes(p);
    }
    return plan;
  }

  void describe(const AttnProblem &p, Plan &plan) const override {
    std::string extra;
    if (decodeRunsAsForward(p))
      extra = concat(" ", p.seqQ, " query tokens, head dims ", p.headDim, "/", p.headDimV,
                     ": as the forward, one pass over the keys,");
    else if (p.op == Op::DecodeChunk)
      extra = concat(" ", plan.numChunks, " KV chunks per sequence,");
    plan.description = concat("host.reference ", opName(p.op), " ", storageName(p.dtype), " d", p.headDim, " dv",
                              p.headDimV, ",", extra, " fp64 accumulate, deterministic");
  }

  Plan planMerge(const MergeProblem &p) const override {
    (void)p;
    Plan plan;
    plan.kernel = KernelId::HostReference;
    plan.deterministic = true;
    return plan;
  }

  void describeMerge(const MergeProblem &p, Plan &plan) const override {
    plan.description = concat("host.reference merge of ", p.states, " states into ", storageName(p.outType), " dv",
                              p.headDimV, ", fp64 accumulate, deterministic");
  }

  void validateIndexData(const AttnProblem &p) const override { (void)host::validateIndexArrays(p); }

  // The index arrays decide every address read; checking them again costs O(batch), gives the lengths that size the
  // work, and keeps a caller that skipped validateIndexData from reading outside the tensors.
  void forward(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    (void)plan;
    (void)workspace;
    host::forward(p, host::validateIndexArrays(p), buf);
  }

  void backward(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    if (p.paged) (void)this->plan(p);  // throws NOT_SUPPORTED with the reason
    require(buf.lse != nullptr, "backward needs the LSE written by the forward");
    require(workspace != nullptr || plan.workspaceBytes == 0, "backward needs a workspace of ", plan.workspaceBytes,
            " bytes");
    host::backward(p, host::validateIndexArrays(p), buf, workspace);
  }

  void decode(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) override {
    if (decodeRunsAsForward(p)) {
      host::forward(p, host::validateIndexArrays(p), buf);
      return;
    }
    (void)host::validateIndexArrays(p);
    require(plan.numChunks >= 1, "decode plan has ", plan.numChunks, " chunks");
    const host::DecodeWorkspace w = host::decodeWorkspace(p, plan.numChunks);
    require(workspace != nullptr || w.totalBytes == 0, "decode needs a workspace of ", w.totalBytes, " bytes");
    host::decode(p, plan.numChunks, w, buf, workspace);
  }

  void merge(const MergeProblem &p, const Plan &plan, const MergeBuffers &buf, void *workspace) override {
    (void)plan;
    (void)workspace;
    host::merge(p, buf);
  }

 private:
  CUstream_st *stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> makeHostBackend() { return std::make_unique<HostBackend>(); }

}  // namespace flashattn
