// SPDX-License-Identifier: BSD-3-Clause
// The operations. Each entry point is the same four steps:
//   1. resolve the handle and descriptors (NOT_INITIALIZED when dead),
//   2. build the normalized problem (problem_builder.cpp: every shape/type/stride/attribute rule),
//   3. ask the backend for the plan (kernel choice + workspace layout; the size query stops here),
//   4. check the pointers and the workspace, let the backend check its index data, then run.
// Nothing is written before step 4's checks pass, so a failed call leaves every output untouched.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "api/guard.hpp"
#include "core/checked.hpp"
#include "core/descriptors.hpp"
#include "core/error.hpp"
#include "core/problem_builder.hpp"

using namespace flashattn;

namespace {

AttnTensors attnTensors(flashAttnTensorDescriptor_t q, flashAttnTensorDescriptor_t k, flashAttnTensorDescriptor_t v,
                        flashAttnTensorDescriptor_t o, flashAttnTensorDescriptor_t lse) {
  AttnTensors t;
  t.q = &tensorRef(q, "Q");
  t.k = &tensorRef(k, "K");
  t.v = &tensorRef(v, "V");
  t.o = &tensorRef(o, "O");
  t.lse = optionalTensor(lse, "LSE");
  return t;
}

AttnTensors backwardTensors(flashAttnTensorDescriptor_t q, flashAttnTensorDescriptor_t k, flashAttnTensorDescriptor_t v,
                            flashAttnTensorDescriptor_t o, flashAttnTensorDescriptor_t dO, flashAttnTensorDescriptor_t lse,
                            flashAttnTensorDescriptor_t dQ, flashAttnTensorDescriptor_t dK,
                            flashAttnTensorDescriptor_t dV) {
  AttnTensors t = attnTensors(q, k, v, o, lse);
  t.lse = &tensorRef(lse, "LSE");
  t.dO = &tensorRef(dO, "dO");
  t.dQ = &tensorRef(dQ, "dQ");
  t.dK = &tensorRef(dK, "dK");
  t.dV = &tensorRef(dV, "dV");
  return t;
}

void writeDescription(const Plan &plan, char *description, size_t len, int32_t *deterministic) {
  if (description && len > 0) {
    const size_t n = plan.description.size() < len - 1 ? plan.description.size() : len - 1;
    std::memcpy(description, plan.description.data(), n);
    description[n] = '\0';
  }
  if (deterministic) *deterministic = plan.deterministic ? 1 : 0;
}

void requireOutputPointer(const void *p, const char *name) { require(p != nullptr, name, " (output pointer) is NULL"); }

struct NamedPointer {
  const char *name;
  const void *pointer;
};

// The run's plan: the size query's problem plus whether every data pointer is 16-byte aligned, which only the run
// knows (a chooser may serve unaligned rows with another kernel, or refuse them: the refusal then names the pointer).
// A pointer that is not even element-aligned is left to checkBuffers (BAD_PARAM).
Plan planRun(flashAttnContext &ctx, AttnProblem &p, std::initializer_list<NamedPointer> pointers) {
  const NamedPointer *unaligned = nullptr;
  for (const NamedPointer &n : pointers) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(n.pointer);
    if (n.pointer != nullptr && address % 16 != 0 && address % dtypeSize(p.dtype) == 0) {
      unaligned = &n;
      break;
    }
  }
  p.buffersAligned16 = unaligned == nullptr;
  try {
    return ctx.backend->plan(p);
  } catch (const Error &e) {
    if (unaligned == nullptr || e.status() != FLASHATTN_STATUS_NOT_SUPPORTED) throw;
    fail(FLASHATTN_STATUS_NOT_SUPPORTED, e.what(), " (", unaligned->name, " pointer ", unaligned->pointer, ")");
  }
}

// What Forward and DecodeChunk share once their descriptors are read: the run's plan, the buffers' checks against
// each other and the workspace, the index arrays' contents, and the buffers the backend's operation receives.
struct CheckedRun {
  Plan plan;
  AttnBuffers buffers;
};

CheckedRun checkedAttention(flashAttnContext &ctx, AttnProblem &p, const AttnTensors &t, const void *q, const void *k,
                            const void *v, void *o, float *lse, void *workspace, size_t workspaceBytes) {
  CheckedRun run;
  run.plan = planRun(ctx, p, {{"Q", q}, {"K", k}, {"V", v}, {"O", o}});
  const CallMemory memory = checkBuffers(
      {{"Q", q, t.q, false}, {"K", k, t.k, false}, {"V", v, t.v, false}, {"O", o, t.o, true}, {"LSE", lse, t.lse, true}},
      &p);
  checkWorkspace(run.plan, workspace, workspaceBytes, memory);
  ctx.backend->validateIndexData(p);
  run.buffers.q = q;
  run.buffers.k = k;
  run.buffers.v = v;
  run.buffers.o = o;
  run.buffers.lse = lse;
  return run;
}

}  // namespace

extern "C" {

FLASHATTN_API flashAttnStatus_t flashAttnCheckSupport(flashAttnHandle_t handle, flashAttnOperation_t operation,
                                                      flashAttnAttentionDescriptor_t attnDesc,
                                                      flashAttnSeqDescriptor_t seqDesc,
                                                      flashAttnTensorDescriptor_t qDesc,
                                                      flashAttnTensorDescriptor_t kDesc,
                                                      flashAttnTensorDescriptor_t vDesc,
                                                      flashAttnTensorDescriptor_t oDesc, char *description,
                                                      size_t descriptionLen, int32_t *deterministic) {
  return guarded("flashAttnCheckSupport", [&] {
    flashAttnContext &ctx = handleRef(handle);
    require(description != nullptr || descriptionLen == 0, "description is NULL but descriptionLen is ",
            descriptionLen);
    Plan plan;
    const int32_t opCode = rawEnum(operation);
    switch (opCode) {
      case FLASHATTN_OP_FORWARD:
      case FLASHATTN_OP_BACKWARD:
      case FLASHATTN_OP_DECODE_CHUNK: {
        const Op op = opCode == FLASHATTN_OP_FORWARD    ? Op::Forward
                      : opCode == FLASHATTN_OP_BACKWARD ? Op::Backward
                                                        : Op::DecodeChunk;
        AttnTensors t = attnTensors(qDesc, kDesc, vDesc, oDesc, nullptr);
        // Backward needs an LSE; CheckSupport takes none, so stand in a packed one of the right shape. Its strides are
        // products of Q's dims, which may each reach 2^40: a product that overflows means no packed LSE of that shape
        // is addressable, and buildAttnProblem's span check refuses the rest.
        flashAttnTensorStruct lse;
        if (op == Op::Backward && (t.q->rank == 3 || t.q->rank == 4)) {  // another rank fails on Q's own rank
          const bool ragged = t.q->rank == 3;
          lse.isSet = true;
          lse.dtype = DType::FP32;
          lse.rank = ragged ? 2 : 3;
          for (int i = 0; i < lse.rank; ++i) lse.dims[i] = t.q->dims[i];
          lse.strides[lse.rank - 1] = 1;
          for (int i = lse.rank - 2; i >= 0; --i)
            lse.strides[i] = mulOr(lse.strides[i + 1], lse.dims[i + 1], FLASHATTN_STATUS_BAD_PARAM,
                                   "Q has dims ", t.q->dims[0], " x ", t.q->dims[1], ragged ? "" : " x ",
                                   ragged ? "" : std::to_string(t.q->dims[2]),
                                   ": the LSE Backward reads for them spans more than int64 elements");
          t.lse = &lse;
        }
        const AttnProblem p = buildAttnProblem(op, optionalAttention(attnDesc), optionalSeq(seqDesc), t, 0);
        plan = ctx.backend->plan(p);
        ctx.backend->describe(p, plan);
        break;
      }
      case FLASHATTN_OP_MERGE_STATES: {
        require(kDesc == nullptr && vDesc == nullptr, "kDesc and vDesc must be NULL for MERGE_STATES");
        const MergeProblem m = buildMergeProblem(tensorRef(qDesc, "partialO"), nullptr, tensorRef(oDesc, "O"), nullptr);
        plan = ctx.backend->planMerge(m);
        ctx.backend->describeMerge(m, plan);
        break;
      }
      default:
        fail(FLASHATTN_STATUS_BAD_PARAM, "operation is ", opCode,
             ": expected FORWARD (0), BACKWARD (1), DECODE_CHUNK (2) or MERGE_STATES (3)");
    }
    writeDescription(plan, description, descriptionLen, deterministic);
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnForwardGetWorkspaceSize(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t lseDesc, size_t *bytes) {
  return guarded("flashAttnForwardGetWorkspaceSize", [&] {
    flashAttnContext &ctx = handleRef(handle);
    requireOutputPointer(bytes, "bytes");
    const AttnProblem p = buildAttnProblem(Op::Forward, optionalAttention(attnDesc), optionalSeq(seqDesc),
                                           attnTensors(qDesc, kDesc, vDesc, oDesc, lseDesc), 0);
    *bytes = ctx.backend->plan(p).workspaceBytes;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnForward(flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc,
                                                 flashAttnSeqDescriptor_t seqDesc, flashAttnTensorDescriptor_t qDesc,
                                                 const void *q, flashAttnTensorDescriptor_t kDesc, const void *k,
                                                 flashAttnTensorDescriptor_t vDesc, const void *v,
                                                 flashAttnTensorDescriptor_t oDesc, void *o,
                                                 flashAttnTensorDescriptor_t lseDesc, float *lse, void *workspace,
                                                 size_t workspaceBytes) {
  return guarded("flashAttnForward", [&] {
    flashAttnContext &ctx = handleRef(handle);
    const AttnTensors t = attnTensors(qDesc, kDesc, vDesc, oDesc, lseDesc);
    AttnProblem p = buildAttnProblem(Op::Forward, optionalAttention(attnDesc), optionalSeq(seqDesc), t, 0);
    const CheckedRun run = checkedAttention(ctx, p, t, q, k, v, o, lse, workspace, workspaceBytes);
    ctx.backend->forward(p, run.plan, run.buffers, workspace);
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnBackwardGetWorkspaceSize(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t lseDesc, size_t *bytes) {
  return guarded("flashAttnBackwardGetWorkspaceSize", [&] {
    flashAttnContext &ctx = handleRef(handle);
    requireOutputPointer(bytes, "bytes");
    AttnTensors t = attnTensors(qDesc, kDesc, vDesc, oDesc, lseDesc);
    t.lse = &tensorRef(lseDesc, "LSE");  // Backward reads the forward's LSE: not optional here
    const AttnProblem p = buildAttnProblem(Op::Backward, optionalAttention(attnDesc), optionalSeq(seqDesc), t, 0);
    *bytes = ctx.backend->plan(p).workspaceBytes;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnBackwardGetWorkspaceSizeWithGradients(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t dODesc, flashAttnTensorDescriptor_t lseDesc,
    flashAttnTensorDescriptor_t dQDesc, flashAttnTensorDescriptor_t dKDesc, flashAttnTensorDescriptor_t dVDesc,
    size_t *bytes) {
  return guarded("flashAttnBackwardGetWorkspaceSizeWithGradients", [&] {
    flashAttnContext &ctx = handleRef(handle);
    requireOutputPointer(bytes, "bytes");
    const AttnTensors t = backwardTensors(qDesc, kDesc, vDesc, oDesc, dODesc, lseDesc, dQDesc, dKDesc, dVDesc);
    const AttnProblem p = buildAttnProblem(Op::Backward, optionalAttention(attnDesc), optionalSeq(seqDesc), t, 0);
    *bytes = ctx.backend->plan(p).workspaceBytes;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnBackward(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, const void *q, flashAttnTensorDescriptor_t kDesc, const void *k,
    flashAttnTensorDescriptor_t vDesc, const void *v, flashAttnTensorDescriptor_t oDesc, const void *o,
    flashAttnTensorDescriptor_t dODesc, const void *dO, flashAttnTensorDescriptor_t lseDesc, const float *lse,
    flashAttnTensorDescriptor_t dQDesc, void *dQ, flashAttnTensorDescriptor_t dKDesc, void *dK,
    flashAttnTensorDescriptor_t dVDesc, void *dV, void *workspace, size_t workspaceBytes) {
  return guarded("flashAttnBackward", [&] {
    flashAttnContext &ctx = handleRef(handle);
    const AttnTensors t = backwardTensors(qDesc, kDesc, vDesc, oDesc, dODesc, lseDesc, dQDesc, dKDesc, dVDesc);
    AttnProblem p = buildAttnProblem(Op::Backward, optionalAttention(attnDesc), optionalSeq(seqDesc), t, 0);
    const Plan plan = planRun(ctx, p, {{"Q", q}, {"K", k}, {"V", v}, {"O", o}, {"dO", dO}, {"dQ", dQ}, {"dK", dK},
                                       {"dV", dV}});
    const CallMemory memory = checkBuffers(
        {{"Q", q, t.q, false}, {"K", k, t.k, false}, {"V", v, t.v, false}, {"O", o, t.o, false},
         {"dO", dO, t.dO, false}, {"LSE", lse, t.lse, false}, {"dQ", dQ, t.dQ, true}, {"dK", dK, t.dK, true},
         {"dV", dV, t.dV, true}},
        &p);
    // flashAttnBackwardGetWorkspaceSize sizes the gradients in their tensors' strides; staging other ones needs more.
    if (plan.stagingBytes > 0 && workspaceBytes < plan.workspaceBytes)
      fail(FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE, "workspaceBytes is ", workspaceBytes, ", this call needs ",
           plan.workspaceBytes, " (", plan.stagingBytes, " of them to stage tensors whose strides are not multiples of ",
           "16 bytes): size it with flashAttnBackwardGetWorkspaceSizeWithGradients");
    checkWorkspace(plan, workspace, workspaceBytes, memory);
    ctx.backend->validateIndexData(p);
    AttnBuffers buf;
    buf.q = q;
    buf.k = k;
    buf.v = v;
    buf.o = const_cast<void *>(o);  // an input here; AttnBuffers shares the field with the forward's output
    buf.lse = const_cast<float *>(lse);
    buf.dO = dO;
    buf.dQ = dQ;
    buf.dK = dK;
    buf.dV = dV;
    ctx.backend->backward(p, plan, buf, workspace);
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnDecodeChunkGetWorkspaceSize(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t lseDesc, int32_t numChunks, size_t *bytes) {
  return guarded("flashAttnDecodeChunkGetWorkspaceSize", [&] {
    flashAttnContext &ctx = handleRef(handle);
    requireOutputPointer(bytes, "bytes");
    const AttnProblem p = buildAttnProblem(Op::DecodeChunk, optionalAttention(attnDesc), optionalSeq(seqDesc),
                                           attnTensors(qDesc, kDesc, vDesc, oDesc, lseDesc), numChunks);
    *bytes = ctx.backend->plan(p).workspaceBytes;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnDecodeChunk(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, const void *q, flashAttnTensorDescriptor_t kDesc, const void *k,
    flashAttnTensorDescriptor_t vDesc, const void *v, flashAttnTensorDescriptor_t oDesc, void *o,
    flashAttnTensorDescriptor_t lseDesc, float *lse, int32_t numChunks, void *workspace, size_t workspaceBytes) {
  return guarded("flashAttnDecodeChunk", [&] {
    flashAttnContext &ctx = handleRef(handle);
    const AttnTensors t = attnTensors(qDesc, kDesc, vDesc, oDesc, lseDesc);
    AttnProblem p =
        buildAttnProblem(Op::DecodeChunk, optionalAttention(attnDesc), optionalSeq(seqDesc), t, numChunks);
    const CheckedRun run = checkedAttention(ctx, p, t, q, k, v, o, lse, workspace, workspaceBytes);
    ctx.backend->decode(p, run.plan, run.buffers, workspace);
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnMergeStatesGetWorkspaceSize(flashAttnHandle_t handle,
                                                                     flashAttnTensorDescriptor_t partialODesc,
                                                                     flashAttnTensorDescriptor_t partialLseDesc,
                                                                     flashAttnTensorDescriptor_t oDesc,
                                                                     flashAttnTensorDescriptor_t lseDesc,
                                                                     size_t *bytes) {
  return guarded("flashAttnMergeStatesGetWorkspaceSize", [&] {
    flashAttnContext &ctx = handleRef(handle);
    requireOutputPointer(bytes, "bytes");
    const MergeProblem m = buildMergeProblem(tensorRef(partialODesc, "partialO"), &tensorRef(partialLseDesc, "partialLse"),
                                             tensorRef(oDesc, "O"), optionalTensor(lseDesc, "LSE"));
    *bytes = ctx.backend->planMerge(m).workspaceBytes;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnMergeStates(flashAttnHandle_t handle,
                                                     flashAttnTensorDescriptor_t partialODesc, const float *partialO,
                                                     flashAttnTensorDescriptor_t partialLseDesc,
                                                     const float *partialLse, flashAttnTensorDescriptor_t oDesc,
                                                     void *o, flashAttnTensorDescriptor_t lseDesc, float *lse,
                                                     void *workspace, size_t workspaceBytes) {
  return guarded("flashAttnMergeStates", [&] {
    flashAttnContext &ctx = handleRef(handle);
    const flashAttnTensorStruct &po = tensorRef(partialODesc, "partialO");
    const flashAttnTensorStruct &pl = tensorRef(partialLseDesc, "partialLse");
    const flashAttnTensorStruct &od = tensorRef(oDesc, "O");
    const flashAttnTensorStruct *ld = optionalTensor(lseDesc, "LSE");
    const MergeProblem m = buildMergeProblem(po, &pl, od, ld);
    const Plan plan = ctx.backend->planMerge(m);
    const CallMemory memory = checkBuffers({{"partialO", partialO, &po, false},
                                            {"partialLse", partialLse, &pl, false},
                                            {"O", o, &od, true},
                                            {"LSE", lse, ld, true}});
    checkWorkspace(plan, workspace, workspaceBytes, memory);
    MergeBuffers buf;
    buf.partialO = partialO;
    buf.partialLse = partialLse;
    buf.o = o;
    buf.lse = lse;
    ctx.backend->merge(m, plan, buf, workspace);
  });
}

}  // extern "C"
