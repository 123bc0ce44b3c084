// SPDX-License-Identifier: BSD-3-Clause
// The choosers of src/cuda/family.hpp on fake device descriptions: every operation's pick, by KernelId, for the GPUs
// the library targets. No kernel runs: on a machine without a GPU the occupancy queries answer their defaults, and the
// tensor-map encoder is absent (so decode plans keep to cp.async there, and the decode assertions below hold for both).
// A check that needs an instance this build left out (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS) is left out, or its test
// skipped where every check needs it: tests/common/built_instances.hpp, from the build's instance lists.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "built_instances.hpp"
#include "core/plan.hpp"
#include "core/problem.hpp"
#include "cuda/family.hpp"
#include "cuda/tensor_map.hpp"

namespace {

using flashattn::AttnProblem;
using flashattn::DType;
using flashattn::KernelId;
using flashattn::Mask;
using flashattn::Op;
using flashattn::Plan;
using flashattn::cuda::DeviceInfo;
using fa_test::Family;
using fa_test::partBuilt;
using fa_test::partBuiltAtLeast;

DeviceInfo fakeDevice(const char *name, int major, int minor, int sms, std::size_t smemOptin, int codeArch,
                      std::size_t l2Mb) {
  DeviceInfo d;
  d.device = 0;
  d.ccMajor = major;
  d.ccMinor = minor;
  d.numSMs = sms;
  d.smemPerBlockOptin = smemOptin;
  d.l2Bytes = l2Mb << 20;
  d.maxThreadsPerSM = 2048;
  d.portableCodeArch = codeArch;
  std::snprintf(d.name, sizeof d.name, "%s", name);
  return d;
}

const DeviceInfo kA100 = fakeDevice("A100 (fake)", 8, 0, 108, 166912, 80, 40);
const DeviceInfo kL4 = fakeDevice("L4 (fake)", 8, 9, 58, 101376, 80, 48);
const DeviceInfo kH100 = fakeDevice("H100 (fake)", 9, 0, 132, 232448, 90, 50);
const DeviceInfo kH100Ptx80 = fakeDevice("H100 running compute_80 PTX (fake)", 9, 0, 132, 232448, 80, 50);

// A dense BSHD problem [batch, heads, seq, headDim].
AttnProblem dense(Op op, DType dtype, int64_t heads, int64_t kvHeads, int64_t seqQ, int64_t seqK, int64_t headDim) {
  AttnProblem p;
  p.op = op;
  p.dtype = dtype;
  p.batch = 2;
  p.heads = heads;
  p.kvHeads = kvHeads;
  p.seqQ = seqQ;
  p.seqK = seqK;
  p.headDim = headDim;
  p.headDimV = headDim;
  auto bshd = [&](int64_t h, int64_t s) {
    return flashattn::Layout{s * h * headDim, headDim, h * headDim};
  };
  p.q = p.o = p.dO = p.dQ = bshd(heads, seqQ);
  p.k = p.v = p.dK = p.dV = bshd(kvHeads, seqK);
  p.lse = flashattn::Layout{heads * seqQ, seqQ, 1};
  p.hasLse = true;
  p.scale = 0.125f;
  return p;
}

// The same problem with V, O, dO and dV of headDimV columns (BSHD).
AttnProblem withHeadDimV(AttnProblem p, int64_t headDimV) {
  p.headDimV = headDimV;
  p.v = p.dV = flashattn::Layout{p.seqK * p.kvHeads * headDimV, headDimV, p.kvHeads * headDimV};
  p.o = p.dO = flashattn::Layout{p.seqQ * p.heads * headDimV, headDimV, p.heads * headDimV};
  return p;
}

struct Pick {
  bool served;
  Plan plan;
  std::string why;
};

// The C API's name of a storage type (the same values), which the instance lists use.
flashAttnDataType_t apiType(DType t) { return static_cast<flashAttnDataType_t>(t); }

Pick pick(const DeviceInfo &dev, const AttnProblem &p) {
  Pick r;
  r.served = flashattn::cuda::choose(dev, p, &r.plan, &r.why);
  return r;
}

TEST(Choosers, RegistryHasEveryOperation) {
  for (KernelId id : {KernelId::ForwardMma, KernelId::ForwardFfma, KernelId::BackwardMma, KernelId::BackwardFfma,
                      KernelId::DecodeSplitKv, KernelId::DecodeAsForward})
    EXPECT_NE(flashattn::cuda::findFamily(id), nullptr) << flashattn::kernelIdName(id);
}

TEST(Choosers, ForwardPicks) {
  const AttnProblem bf16 = dense(Op::Forward, DType::BF16, 16, 4, 1024, 1024, 128);
  if (partBuilt(Family::Forward, FLASHATTN_DATA_BF16, 128)) {
    for (const DeviceInfo *dev : {&kA100, &kL4}) {
      const Pick r = pick(*dev, bf16);
      ASSERT_TRUE(r.served) << dev->name << ": " << r.why;
      EXPECT_EQ(r.plan.kernel, KernelId::ForwardMma) << dev->name << ": " << r.plan.description;
      EXPECT_EQ(r.plan.as<flashattn::ForwardConfig>().instance.headDim, 128);
    }
  }
  if (partBuiltAtLeast(Family::Forward, FLASHATTN_DATA_FP32, 64)) {
    const Pick fp32 = pick(kA100, dense(Op::Forward, DType::FP32, 8, 8, 100, 100, 64));
    ASSERT_TRUE(fp32.served) << fp32.why;
    EXPECT_EQ(fp32.plan.kernel, KernelId::ForwardFfma);
  }
  // A head dim between instances runs padded on the next one.
  if (partBuiltAtLeast(Family::Forward, FLASHATTN_DATA_FP16, 40)) {
    const Pick padded = pick(kA100, dense(Op::Forward, DType::FP16, 8, 8, 100, 100, 40));
    ASSERT_TRUE(padded.served) << padded.why;
    EXPECT_GE(padded.plan.as<flashattn::ForwardConfig>().instance.headDim, 40);
    EXPECT_NE(padded.plan.description.find("zero-padded"), std::string::npos) << padded.plan.description;
  }
  // Any width up to 256 (element loads where rows are not whole 16-byte vectors), Q/K's and V/O's apart.
  if (partBuilt(Family::Forward, FLASHATTN_DATA_BF16, 64)) {
    const Pick odd = pick(kA100, dense(Op::Forward, DType::BF16, 8, 8, 100, 100, 59));
    ASSERT_TRUE(odd.served) << odd.why;
    EXPECT_EQ(odd.plan.kernel, KernelId::ForwardMma) << odd.plan.description;
    EXPECT_EQ(odd.plan.as<flashattn::ForwardConfig>().instance.headDim, 64) << odd.plan.description;
  }
  if (partBuilt(Family::Forward, FLASHATTN_DATA_BF16, 192)) {
    const Pick mla = pick(kL4, withHeadDimV(dense(Op::Forward, DType::BF16, 16, 16, 512, 512, 192), 128));
    ASSERT_TRUE(mla.served) << mla.why;
    EXPECT_EQ(mla.plan.as<flashattn::ForwardConfig>().instance.headDim, 192) << mla.plan.description;
    EXPECT_NE(mla.plan.description.find("headDimV 128"), std::string::npos) << mla.plan.description;
  }
  if (partBuilt(Family::Forward, FLASHATTN_DATA_FP16, 128)) {
    const Pick narrowV = pick(kA100, withHeadDimV(dense(Op::Forward, DType::FP16, 8, 2, 300, 300, 128), 64));
    ASSERT_TRUE(narrowV.served) << narrowV.why;
    EXPECT_EQ(narrowV.plan.as<flashattn::ForwardConfig>().instance.headDim, 128) << narrowV.plan.description;
  }
  const Pick wideV = pick(kA100, withHeadDimV(dense(Op::Forward, DType::BF16, 8, 8, 100, 100, 64), 512));
  EXPECT_FALSE(wideV.served);
  EXPECT_NE(wideV.why.find("headDimV 512"), std::string::npos) << wideV.why;
}

// The problem's K and V moved into a paged cache [numPages, pageSize, kvHeads, headDim] of pagesPerSeq pages per
// sequence (packed pages; pageStridePad extra elements per page), under a dense Q or, with `ragged`, a ragged one.
AttnProblem pagedCache(AttnProblem p, int64_t pageSize, int64_t pagesPerSeq, bool ragged, int64_t pageStridePad = 0) {
  static const int32_t indexArrays[64] = {};  // never read: the choosers see no index data
  const int64_t row = p.kvHeads * p.headDim;
  p.paged = true;
  p.pageSize = pageSize;
  p.maxPagesPerSeq = pagesPerSeq;
  p.numPages = p.batch * pagesPerSeq;
  p.seqK = pageSize * pagesPerSeq;
  p.blockTable = indexArrays;
  p.seqlensK = indexArrays;
  p.k = p.v = flashattn::Layout{pageSize * row + pageStridePad, p.headDim, row};
  if (ragged) {
    p.ragged = true;
    p.cuSeqlensQ = indexArrays;
    p.totalQ = p.batch * p.seqQ;
    p.q = p.o = flashattn::Layout{0, p.headDim, p.heads * p.headDim};
    p.lse = flashattn::Layout{0, 1, p.heads};
  }
  return p;
}

TEST(Choosers, ForwardOnHopper) {
  AttnProblem p = dense(Op::Forward, DType::BF16, 16, 4, 1024, 1024, 128);
  SKIP_UNLESS_BUILT_AT_LEAST(Family::Forward, FLASHATTN_DATA_BF16, 128);
  const Pick r = pick(kH100, p);
  ASSERT_TRUE(r.served) << r.why;
  if (flashattn::cuda::findFamily(KernelId::ForwardWgmma) == nullptr)
    GTEST_SKIP() << "this build has no sm_90a forward family";
  // The wgmma picks below are of its bf16 d128 instance (d96 zero-padded on it).
  if (!flashattn::cuda::portableOnly()) {
    SKIP_UNLESS_BUILT(Family::ForwardSm90, FLASHATTN_DATA_BF16, 128);
  }
  EXPECT_EQ(r.plan.kernel, flashattn::cuda::portableOnly() ? KernelId::ForwardMma : KernelId::ForwardWgmma)
      << r.plan.description;
  // Head dims between the wgmma instances run zero-padded on the next one (96 on 128).
  const Pick d96 = pick(kH100, dense(Op::Forward, DType::BF16, 16, 4, 512, 512, 96));
  ASSERT_TRUE(d96.served) << d96.why;
  if (!flashattn::cuda::portableOnly()) {
    EXPECT_EQ(d96.plan.kernel, KernelId::ForwardWgmma) << d96.plan.description;
    EXPECT_GE(d96.plan.as<flashattn::ForwardConfig>().instance.headDim, 128);
    EXPECT_NE(d96.plan.description.find("zero-padded"), std::string::npos) << d96.plan.description;
  }
  // DeepSeek-style Q/K 192, V/O 128: the instance compiled for the pair (no zero columns of V).
  const Pick mla = pick(kH100, withHeadDimV(dense(Op::Forward, DType::BF16, 16, 16, 4096, 4096, 192), 128));
  if (partBuiltAtLeast(Family::Forward, FLASHATTN_DATA_BF16, 192)) {
    ASSERT_TRUE(mla.served) << mla.why;
  }
  if (mla.served && !flashattn::cuda::portableOnly() &&
      partBuilt(Family::ForwardSm90, FLASHATTN_DATA_BF16, 192, 128)) {
    EXPECT_EQ(mla.plan.kernel, KernelId::ForwardWgmma) << mla.plan.description;
    EXPECT_EQ(mla.plan.as<flashattn::ForwardConfig>().instance.headDim, 192) << mla.plan.description;
    EXPECT_EQ(mla.plan.as<flashattn::ForwardConfig>().instance.widthV(), 128) << mla.plan.description;
    EXPECT_NE(mla.plan.description.find("d192v128"), std::string::npos) << mla.plan.description;
    // Head dims the pair does not fit as narrowly as an equal instance: 64/128 pads both to 128.
    const Pick narrowQ = pick(kH100, withHeadDimV(dense(Op::Forward, DType::BF16, 16, 16, 512, 512, 64), 128));
    ASSERT_TRUE(narrowQ.served) << narrowQ.why;
    EXPECT_EQ(narrowQ.plan.as<flashattn::ForwardConfig>().instance.headDim, 128) << narrowQ.plan.description;
    EXPECT_EQ(narrowQ.plan.as<flashattn::ForwardConfig>().instance.headDimV, 0) << narrowQ.plan.description;
  }
  // Softcap and ALiBi run on the wgmma kernel's tensor-map path; where the driver has no tensor-map encoder (a
  // machine without a GPU) they fall to the portable kernels, saying why.
  AttnProblem softcap = p;
  softcap.softcap = 30.f;
  const Pick sc = pick(kH100, softcap);
  ASSERT_TRUE(sc.served) << sc.why;
  if (!flashattn::cuda::portableOnly() && flashattn::cuda::tensorMapEncoderAvailable()) {
    EXPECT_EQ(sc.plan.kernel, KernelId::ForwardWgmma) << sc.plan.description;
    EXPECT_NE(sc.plan.description.find("softcap"), std::string::npos) << sc.plan.description;
  } else {
    EXPECT_EQ(sc.plan.kernel, KernelId::ForwardMma) << sc.plan.description;
  }
  // What the wgmma family leaves to the portable one, each with its reason in the description.
  struct Case {
    const char *name;
    AttnProblem problem;
    const char *reason;
  };
  AttnProblem unaligned = p;
  unaligned.buffersAligned16 = false;
  AttnProblem oddStride = p;
  oddStride.q.row += 4;
  AttnProblem pagedSoftcap = pagedCache(softcap, 16, 64, false);
  const Case cases[] = {{"d40 fp32", dense(Op::Forward, DType::FP32, 16, 4, 512, 512, 40), "FP16/BF16 only"},
                        {"paged softcap", pagedSoftcap, "softcap runs on the portable forward kernels"},
                        {"d59", dense(Op::Forward, DType::BF16, 16, 4, 512, 512, 59), "multiple of 8"},
                        {"unaligned pointers", unaligned, "16-byte aligned"},
                        {"Q row stride", oddStride, "Q row stride"}};
  for (const Case &c : cases) {
    if (!partBuiltAtLeast(Family::Forward, apiType(c.problem.dtype), c.problem.headDim)) continue;
    const Pick q = pick(kH100, c.problem);
    ASSERT_TRUE(q.served) << c.name << ": " << q.why;
    EXPECT_NE(q.plan.kernel, KernelId::ForwardWgmma) << c.name << ": " << q.plan.description;
    if (flashattn::cuda::portableOnly()) continue;  // the wgmma family was never asked
    const std::string described = q.plan.description;
    const std::size_t at = described.find("wgmma kernel not used: ");
    ASSERT_NE(at, std::string::npos) << c.name << ": " << described;
    EXPECT_NE(described.find(c.reason, at), std::string::npos) << c.name << ": " << described;
  }
}


// A paged cache runs on the forward families themselves: the portable ones anywhere, the wgmma one on sm90 where the
// page, row and head strides are whole 16-byte vectors; its plan says so.
TEST(Choosers, PagedForwardPicks) {
  const AttnProblem base = dense(Op::Forward, DType::BF16, 32, 8, 512, 4096, 128);
  SKIP_UNLESS_BUILT_AT_LEAST(Family::Forward, FLASHATTN_DATA_BF16, 128);
  const bool wgmma = flashattn::cuda::findFamily(KernelId::ForwardWgmma) != nullptr && !flashattn::cuda::portableOnly();
  // The wgmma family's picks are of its bf16 d128 instance.
  const bool wgmmaBuilt = wgmma && partBuilt(Family::ForwardSm90, FLASHATTN_DATA_BF16, 128);
  const bool fp32Built = partBuiltAtLeast(Family::Forward, FLASHATTN_DATA_FP32, 64);
  for (const bool ragged : {false, true}) {
    const AttnProblem p = pagedCache(base, 16, 256, ragged);
    for (const DeviceInfo *dev : {&kA100, &kL4}) {
      const Pick r = pick(*dev, p);
      ASSERT_TRUE(r.served) << dev->name << ": " << r.why;
      EXPECT_EQ(r.plan.kernel, KernelId::ForwardMma) << dev->name << ": " << r.plan.description;
      EXPECT_NE(r.plan.description.find("paged"), std::string::npos) << r.plan.description;
      EXPECT_EQ(r.plan.workspaceBytes, 0u);
    }
    if (fp32Built) {
      AttnProblem fp32 = pagedCache(dense(Op::Forward, DType::FP32, 8, 2, 100, 300, 64), 3, 100, ragged);
      const Pick f = pick(kA100, fp32);
      ASSERT_TRUE(f.served) << f.why;
      EXPECT_EQ(f.plan.kernel, KernelId::ForwardFfma) << f.plan.description;
    }
    const Pick h = pick(kH100, p);
    ASSERT_TRUE(h.served) << h.why;
    if (!wgmma || wgmmaBuilt) {
      EXPECT_EQ(h.plan.kernel, wgmma ? KernelId::ForwardWgmma : KernelId::ForwardMma) << h.plan.description;
    }
    // A page stride of an odd element count: the wgmma kernel's 16-byte copies cannot walk it, the portable one can.
    const Pick odd = pick(kH100, pagedCache(base, 16, 256, ragged, 3));
    ASSERT_TRUE(odd.served) << odd.why;
    EXPECT_EQ(odd.plan.kernel, KernelId::ForwardMma) << odd.plan.description;
    if (wgmmaBuilt) {
      EXPECT_NE(odd.plan.description.find("K batch stride"), std::string::npos) << odd.plan.description;
    }
  }
  // A capacity past the kernels' 32-bit key indices is refused by name.
  const Pick huge = pick(kA100, pagedCache(base, 1 << 16, 1 << 16, false));
  EXPECT_FALSE(huge.served);
  EXPECT_NE(huge.why.find("paged"), std::string::npos) << huge.why;
}

// DecodeChunk up to 16 query tokens takes the split-KV decode; past that the forward plan of the same problem, with
// no workspace of its own, dense or paged, whatever numChunks asks for.
TEST(Choosers, DecodePastSixteenQueriesRunsAsForward) {
  AttnProblem p = dense(Op::DecodeChunk, DType::BF16, 32, 8, 16, 4096, 128);
  p.numChunks = 8;
  SKIP_UNLESS_BUILT_AT_LEAST(Family::Decode, FLASHATTN_DATA_BF16, 128);
  SKIP_UNLESS_BUILT_AT_LEAST(Family::Forward, FLASHATTN_DATA_BF16, 128);
  const Pick split = pick(kA100, p);
  ASSERT_TRUE(split.served) << split.why;
  EXPECT_EQ(split.plan.kernel, KernelId::DecodeSplitKv);
  for (const bool paged : {false, true}) {
    AttnProblem q = dense(Op::DecodeChunk, DType::BF16, 32, 8, 17, 4096, 128);
    q.numChunks = 8;
    if (paged) q = pagedCache(q, 16, 256, false);
    for (const DeviceInfo *dev : {&kA100, &kH100}) {
      const Pick r = pick(*dev, q);
      ASSERT_TRUE(r.served) << dev->name << ": " << r.why;
      EXPECT_EQ(r.plan.kernel, KernelId::DecodeAsForward) << r.plan.description;
      const KernelId family = r.plan.as<flashattn::ForwardConfig>().forwardFamily;
      EXPECT_TRUE(family == KernelId::ForwardMma || family == KernelId::ForwardWgmma) << r.plan.description;
      EXPECT_NE(flashattn::cuda::findFamily(family), nullptr);
      EXPECT_EQ(r.plan.workspaceBytes, 0u) << r.plan.description;
      EXPECT_EQ(r.plan.description.rfind("cuda.decode.forward", 0), 0u) << r.plan.description;
    }
  }
  // Head dims the split-KV kernels do not take run as the forward too, at any query count.
  for (const AttnProblem &q : {withHeadDimV(dense(Op::DecodeChunk, DType::BF16, 16, 16, 1, 4096, 128), 64),
                               dense(Op::DecodeChunk, DType::FP16, 8, 2, 2, 4096, 36)}) {
    if (!partBuiltAtLeast(Family::Forward, apiType(q.dtype), q.headDim, q.headDimV)) continue;
    const Pick r = pick(kA100, q);
    ASSERT_TRUE(r.served) << r.why;
    EXPECT_EQ(r.plan.kernel, KernelId::DecodeAsForward) << r.plan.description;
    EXPECT_EQ(r.plan.workspaceBytes, 0u) << r.plan.description;
  }
  // The forward's refusal is the one reported.
  const Pick wide = pick(kA100, dense(Op::DecodeChunk, DType::BF16, 8, 8, 64, 512, 300));
  EXPECT_FALSE(wide.served);
  EXPECT_NE(wide.why.find("headDim 300"), std::string::npos) << wide.why;
}

TEST(Choosers, BackwardPicks) {
  const bool wgmma = flashattn::cuda::findFamily(KernelId::BackwardWgmma) != nullptr && !flashattn::cuda::portableOnly();
  static const float slopes[16] = {};
  if (partBuilt(Family::Backward, FLASHATTN_DATA_FP16, 128)) {
    const AttnProblem p = dense(Op::Backward, DType::FP16, 16, 4, 2048, 2048, 128);
    for (const DeviceInfo *dev : {&kA100, &kL4}) {
      const Pick r = pick(*dev, p);
      ASSERT_TRUE(r.served) << dev->name << ": " << r.why;
      EXPECT_EQ(r.plan.kernel, KernelId::BackwardMma) << dev->name;
      EXPECT_GT(r.plan.workspaceBytes, 0u);
      EXPECT_STREQ(r.plan.regions[3].name, "FP32 dQ");
    }
    // The L4's 99 KB per block takes a smaller tile than the A100's 163 KB.
    EXPECT_LE(pick(kL4, p).plan.as<flashattn::BackwardConfig>().blockM *
                  pick(kL4, p).plan.as<flashattn::BackwardConfig>().blockN,
              pick(kA100, p).plan.as<flashattn::BackwardConfig>().blockM *
                  pick(kA100, p).plan.as<flashattn::BackwardConfig>().blockN);
    const Pick h = pick(kH100, p);
    ASSERT_TRUE(h.served) << h.why;
    if (!wgmma || partBuilt(Family::BackwardSm90, FLASHATTN_DATA_FP16, 128)) {
      EXPECT_EQ(h.plan.kernel, wgmma ? KernelId::BackwardWgmma : KernelId::BackwardMma) << h.plan.description;
    }
    AttnProblem alibi = p;
    alibi.alibiSlopes = slopes;
    const Pick a = pick(kH100, alibi);
    ASSERT_TRUE(a.served) << a.why;
    // d128's transform form (softcap, ALiBi) runs in the producer form, whose maps need the driver's encoder: on the
    // wgmma kernel where this process has initialised a driver with one, the portable kernel elsewhere.
    const bool maps = wgmma && flashattn::cuda::tensorMapEncoderAvailable() &&
                      partBuilt(Family::BackwardSm90, FLASHATTN_DATA_FP16, 128);
    EXPECT_EQ(a.plan.kernel, maps ? KernelId::BackwardWgmma : KernelId::BackwardMma) << a.plan.description;
  }
  // A transform form (`what`: softcap and/or ALiBi) that copies by cp.async serves the problem unordered on the wgmma
  // kernel; deterministic, the portable one says why.
  auto expectTransformUnorderedOnly = [&](AttnProblem capped, const std::string &what) {
    const Pick c = pick(kH100, capped);
    ASSERT_TRUE(c.served) << c.why;
    EXPECT_EQ(c.plan.kernel, KernelId::BackwardWgmma) << c.plan.description;
    EXPECT_NE(c.plan.description.find("logits with " + what), std::string::npos) << c.plan.description;
    capped.deterministic = true;
    const Pick d = pick(kH100, capped);
    ASSERT_TRUE(d.served) << d.why;
    EXPECT_EQ(d.plan.kernel, KernelId::BackwardMma) << d.plan.description;
    EXPECT_NE(d.plan.description.find(what + " in deterministic mode"), std::string::npos) << d.plan.description;
  };
  // d64's transform form copies by cp.async: the wgmma kernel, unordered only.
  const AttnProblem plain64 = dense(Op::Backward, DType::BF16, 8, 8, 512, 512, 64);
  if (wgmma && partBuilt(Family::BackwardSm90, FLASHATTN_DATA_BF16, 64)) {
    AttnProblem capped = plain64;
    capped.softcap = 20.f;
    expectTransformUnorderedOnly(capped, "softcap");
  }
  // The split kernel's head dims (192, 256, Q/K 192 with V/O 128): its transform form serves softcap and ALiBi,
  // unordered, in either form (192's producer form where its maps encode, by cp.async here without a driver).
  for (const AttnProblem &wide : {dense(Op::Backward, DType::BF16, 8, 2, 300, 300, 192),
                                  withHeadDimV(dense(Op::Backward, DType::FP16, 8, 8, 300, 300, 192), 128)}) {
    if (!wgmma || !partBuilt(Family::BackwardSm90, apiType(wide.dtype), wide.headDim, wide.headDimV)) continue;
    AttnProblem capped = wide;
    capped.softcap = 30.f;
    capped.alibiSlopes = slopes;
    expectTransformUnorderedOnly(capped, "softcap and ALiBi");
  }
  if (partBuiltAtLeast(Family::Backward, FLASHATTN_DATA_FP32, 64)) {
    const Pick f = pick(kH100, dense(Op::Backward, DType::FP32, 4, 4, 64, 64, 64));
    ASSERT_TRUE(f.served) << f.why;
    EXPECT_EQ(f.plan.kernel, KernelId::BackwardFfma);
  }
  // Q/K 192, V/O 128: the wgmma backward's d192v128 instance on sm90, the portable kernel's d192 instance elsewhere; a
  // narrower V without an instance of its own on the instance of Q/K.
  if (partBuiltAtLeast(Family::Backward, FLASHATTN_DATA_FP16, 128)) {
    const Pick narrowV = pick(kH100, withHeadDimV(dense(Op::Backward, DType::FP16, 8, 2, 300, 300, 128), 64));
    ASSERT_TRUE(narrowV.served) << narrowV.why;
    EXPECT_EQ(narrowV.plan.kernel, KernelId::BackwardMma) << narrowV.plan.description;
    EXPECT_NE(narrowV.plan.description.find("headDimV 64"), std::string::npos) << narrowV.plan.description;
  }
  for (const DeviceInfo *dev : {&kA100, &kH100}) {
    if (!partBuilt(Family::Backward, FLASHATTN_DATA_BF16, 192)) break;
    const bool onWgmma = dev == &kH100 && wgmma;
    if (onWgmma && !partBuilt(Family::BackwardSm90, FLASHATTN_DATA_BF16, 192, 128)) continue;
    const Pick m = pick(*dev, withHeadDimV(dense(Op::Backward, DType::BF16, 16, 16, 1024, 1024, 192), 128));
    ASSERT_TRUE(m.served) << dev->name << ": " << m.why;
    EXPECT_EQ(m.plan.kernel, onWgmma ? KernelId::BackwardWgmma : KernelId::BackwardMma) << m.plan.description;
    EXPECT_EQ(m.plan.as<flashattn::BackwardConfig>().instance.headDim, 192) << m.plan.description;
  }
  // Equal head dims without an instance of their own: on sm90 the next instance up with zero columns where they are
  // at most a quarter of its products (96 on d128, 160 on d192), the portable kernel below that (80).
  if (!partBuiltAtLeast(Family::Backward, FLASHATTN_DATA_BF16, 96)) return;
  const Pick d96 = pick(kH100, dense(Op::Backward, DType::BF16, 8, 8, 1024, 1024, 96));
  ASSERT_TRUE(d96.served) << d96.why;
  if (wgmma && partBuilt(Family::BackwardSm90, FLASHATTN_DATA_BF16, 128)) {
    EXPECT_EQ(d96.plan.kernel, KernelId::BackwardWgmma) << d96.plan.description;
    EXPECT_EQ(d96.plan.as<flashattn::BackwardConfig>().instance.headDim, 128) << d96.plan.description;
    EXPECT_NE(d96.plan.description.find("zero-padded"), std::string::npos) << d96.plan.description;
  }
  const Pick d160 = pick(kH100, dense(Op::Backward, DType::BF16, 8, 8, 1024, 1024, 160));
  if (wgmma && partBuilt(Family::BackwardSm90, FLASHATTN_DATA_BF16, 192)) {
    EXPECT_EQ(d160.plan.kernel, KernelId::BackwardWgmma) << d160.plan.description;
    EXPECT_EQ(d160.plan.as<flashattn::BackwardConfig>().instance.headDim, 192) << d160.plan.description;
  }
  const Pick d80 = pick(kH100, dense(Op::Backward, DType::BF16, 8, 8, 1024, 1024, 80));
  ASSERT_TRUE(d80.served) << d80.why;
  EXPECT_EQ(d80.plan.kernel, KernelId::BackwardMma) << d80.plan.description;
}

// The wgmma backward's CTA order under a mask: sections of (sequence, KV head) groups, a power of two of them within
// 40 MB of Q, dO and FP32 dQ accumulator (backward.cu groupsPerSectionFor; four fifths of a smaller L2); without a mask
// one group at a time, except in deterministic mode, where sections shorten the chains of turns a wave starts behind.
// The portable kernel takes the same order (on an A100: 32 MB sections).
TEST(Choosers, BackwardSectionsUnderMasks) {
  const bool wgmma = flashattn::cuda::findFamily(KernelId::BackwardWgmma) != nullptr && !flashattn::cuda::portableOnly();
  AttnProblem p = dense(Op::Backward, DType::BF16, 16, 16, 8192, 8192, 128);  // batch 2: 32 groups of 8 MB
  if (!wgmma) GTEST_SKIP() << "no wgmma backward family in this build (or FLASHATTN_KERNEL_FAMILIES=portable)";
  SKIP_UNLESS_BUILT(Family::BackwardSm90, FLASHATTN_DATA_BF16, 128);
  const Pick plain = pick(kH100, p);
  ASSERT_TRUE(plain.served) << plain.why;
  ASSERT_EQ(plain.plan.kernel, KernelId::BackwardWgmma) << plain.plan.description;
  EXPECT_EQ(plain.plan.as<flashattn::BackwardConfig>().groupsPerSection, 1);
  p.deterministic = true;
  EXPECT_EQ(pick(kH100, p).plan.as<flashattn::BackwardConfig>().groupsPerSection, 4);
  p.deterministic = false;
  p.mask = flashattn::Mask::CausalBottomRight;
  EXPECT_EQ(pick(kH100, p).plan.as<flashattn::BackwardConfig>().groupsPerSection, 4);  // 4 x 8.4 MB
  p.seqQ = p.seqK = 2048;
  p.q = p.o = p.dO = p.dQ = p.k = p.v = p.dK = p.dV = flashattn::Layout{2048 * 16 * 128, 128, 16 * 128};
  p.lse = flashattn::Layout{16 * 2048, 2048, 1};
  EXPECT_EQ(pick(kH100, p).plan.as<flashattn::BackwardConfig>().groupsPerSection, 16);  // 16 x 2.1 MB
  p.batch = 1;
  p.heads = p.kvHeads = 3;  // fewer groups than the budget takes: a power of two that fits them
  p.q = p.o = p.dO = p.dQ = p.k = p.v = p.dK = p.dV = flashattn::Layout{2048 * 3 * 128, 128, 3 * 128};
  p.lse = flashattn::Layout{3 * 2048, 2048, 1};
  EXPECT_EQ(pick(kH100, p).plan.as<flashattn::BackwardConfig>().groupsPerSection, 2);
}

// Deterministic mode's turn order on the wgmma backward: descending under a mask bounding the query rows from below
// without a left window, at head dims above 128 without GQA (backward.cu descendingTurnsPay), ascending otherwise;
// the description says which.
TEST(Choosers, BackwardDescendingTurns) {
  const bool wgmma = flashattn::cuda::findFamily(KernelId::BackwardWgmma) != nullptr && !flashattn::cuda::portableOnly();
  AttnProblem p = dense(Op::Backward, DType::BF16, 16, 16, 2048, 2048, 192);
  if (!wgmma) GTEST_SKIP() << "no wgmma backward family in this build (or FLASHATTN_KERNEL_FAMILIES=portable)";
  SKIP_UNLESS_BUILT(Family::BackwardSm90, FLASHATTN_DATA_BF16, 192);
  SKIP_UNLESS_BUILT(Family::BackwardSm90, FLASHATTN_DATA_BF16, 128);
  p.deterministic = true;
  auto descending = [&] {
    const Pick got = pick(kH100, p);
    if (!got.served) {
      ADD_FAILURE() << got.why;
      return false;
    }
    EXPECT_EQ(got.plan.kernel, KernelId::BackwardWgmma) << got.plan.description;
    const bool said = got.plan.description.find("ordered by descending key block") != std::string::npos;
    EXPECT_EQ(said, got.plan.as<flashattn::BackwardConfig>().descendingTurns) << got.plan.description;
    return got.plan.as<flashattn::BackwardConfig>().descendingTurns;
  };
  EXPECT_FALSE(descending());
  p.mask = flashattn::Mask::CausalTopLeft;
  EXPECT_TRUE(descending());
  p.mask = flashattn::Mask::CausalBottomRight;
  EXPECT_TRUE(descending());
  p.windowLeft = 256;  // a left window: the descending walk already finds its predecessor a step ahead
  EXPECT_FALSE(descending());
  p.mask = flashattn::Mask::None;
  p.windowLeft = -1;
  p.windowRight = 64;
  EXPECT_TRUE(descending());
  p.windowRight = 1 << 20;  // wider than both sequences: no window, as the kernels see it
  EXPECT_FALSE(descending());
  auto causalDeterministic = [](int64_t kvHeads, int64_t headDim) {
    AttnProblem q = dense(Op::Backward, DType::BF16, 16, kvHeads, 2048, 2048, headDim);
    q.mask = flashattn::Mask::CausalTopLeft;
    q.deterministic = true;
    return q;
  };
  p = causalDeterministic(4, 192);  // GQA: key block n revisits a block four steps after n + 1, past the L2
  EXPECT_FALSE(descending());
  p = causalDeterministic(16, 128);  // the d128 form's dQ warps already hide the chain
  EXPECT_FALSE(descending());
  p = causalDeterministic(16, 192);
  p.deterministic = false;
  EXPECT_FALSE(descending());
  // The portable family takes the same order.
  p.deterministic = true;
  const Pick portable = pick(kA100, p);
  ASSERT_TRUE(portable.served) << portable.why;
  EXPECT_EQ(portable.plan.kernel, KernelId::BackwardMma) << portable.plan.description;
  EXPECT_TRUE(portable.plan.as<flashattn::BackwardConfig>().descendingTurns) << portable.plan.description;
}

// The portable backward's sections: those of the wgmma family, at most four fifths of the device's L2.
TEST(Choosers, BackwardSectionsPortable) {
  AttnProblem p = dense(Op::Backward, DType::BF16, 16, 16, 9216, 9216, 128);  // batch 2: 32 groups of 9 MiB
  SKIP_UNLESS_BUILT(Family::Backward, FLASHATTN_DATA_BF16, 128);
  auto sections = [&] {
    const Pick got = pick(kA100, p);
    if (!got.served || got.plan.kernel != KernelId::BackwardMma) {
      ADD_FAILURE() << got.why << got.plan.description;
      return -1;
    }
    return got.plan.as<flashattn::BackwardConfig>().groupsPerSection;
  };
  EXPECT_EQ(sections(), 1);
  p.deterministic = true;
  EXPECT_EQ(sections(), 2);  // 2 x 9 MiB within four fifths of the A100's 40 MiB (an H100 takes 4)
  p.deterministic = false;
  p.mask = flashattn::Mask::CausalTopLeft;
  EXPECT_EQ(sections(), 2);
}

// d128 in the producer-warpgroup form takes 80-row query blocks where nothing is masked and the additions are
// unordered; a causal mask or deterministic mode keeps 64 rows; a zero-padded D96 its trimmed 64-row kernel.
TEST(Choosers, BackwardWideBlocks) {
  // The planner's trial encode of the Q/dO maps needs an initialised driver: touch the GPU where there is one (each
  // test runs in a process of its own, so the other choosers keep the driver-less view); without one, skip below.
  (void)cudaFree(nullptr);
  const bool wgmma = flashattn::cuda::findFamily(KernelId::BackwardWgmma) != nullptr && !flashattn::cuda::portableOnly();
  AttnProblem p = dense(Op::Backward, DType::BF16, 16, 16, 4096, 4096, 128);
  if (!wgmma) GTEST_SKIP() << "no wgmma backward family in this build (or FLASHATTN_KERNEL_FAMILIES=portable)";
  SKIP_UNLESS_BUILT(Family::BackwardSm90, FLASHATTN_DATA_BF16, 128);
  const Pick plain = pick(kH100, p);
  ASSERT_TRUE(plain.served) << plain.why;
  const auto &config = plain.plan.as<flashattn::BackwardConfig>();
  if (!config.tma) GTEST_SKIP() << "no tensor-map encoder here: " << plain.plan.description;
  EXPECT_EQ(config.blockM, 80) << plain.plan.description;
  EXPECT_NE(plain.plan.description.find("tile 80x128"), std::string::npos) << plain.plan.description;
  AttnProblem causal = p;
  causal.mask = flashattn::Mask::CausalBottomRight;
  EXPECT_EQ(pick(kH100, causal).plan.as<flashattn::BackwardConfig>().blockM, 64);
  AttnProblem ordered = p;
  ordered.deterministic = true;
  EXPECT_EQ(pick(kH100, ordered).plan.as<flashattn::BackwardConfig>().blockM, 64);
  const Pick d96 = pick(kH100, dense(Op::Backward, DType::BF16, 16, 16, 4096, 4096, 96));
  ASSERT_TRUE(d96.served) << d96.why;
  EXPECT_EQ(d96.plan.as<flashattn::BackwardConfig>().blockM, 64) << d96.plan.description;
  // Where 80-row blocks pad more than their speed wins back, 64 rows: 512 rows (560 padded), 64 rows (80).
  for (int64_t rows : {int64_t(512), int64_t(64)}) {
    const AttnProblem shortQ = dense(Op::Backward, DType::BF16, 16, 16, rows, 4096, 128);
    EXPECT_EQ(pick(kH100, shortQ).plan.as<flashattn::BackwardConfig>().blockM, 64) << rows;
  }
  const AttnProblem s1k = dense(Op::Backward, DType::BF16, 16, 16, 1024, 1024, 128);
  EXPECT_EQ(pick(kH100, s1k).plan.as<flashattn::BackwardConfig>().blockM, 80);
  // The workspace does not depend on the rows of a step: the size query and the run agree whichever form runs.
  EXPECT_EQ(plain.plan.workspaceBytes, pick(kH100, causal).plan.workspaceBytes);
}

// Q/K 192 with V/O 128 in the producer form: 96 keys a CTA (hasWideKeysForm), unordered and deterministic, under a mask
// or not; softcap stays on the split kernel's 64. The workspace does not depend on it.
TEST(Choosers, BackwardWideKeys) {
  (void)cudaFree(nullptr);  // the trial encode of the Q/dO maps needs an initialised driver (BackwardWideBlocks)
  const bool wgmma = flashattn::cuda::findFamily(KernelId::BackwardWgmma) != nullptr && !flashattn::cuda::portableOnly();
  if (!wgmma) GTEST_SKIP() << "no wgmma backward family in this build (or FLASHATTN_KERNEL_FAMILIES=portable)";
  SKIP_UNLESS_BUILT(Family::BackwardSm90, FLASHATTN_DATA_BF16, 192, 128);
  AttnProblem p = withHeadDimV(dense(Op::Backward, DType::BF16, 16, 16, 4096, 4096, 192), 128);
  p.mask = flashattn::Mask::CausalBottomRight;
  const Pick causal = pick(kH100, p);
  ASSERT_TRUE(causal.served) << causal.why;
  if (!causal.plan.as<flashattn::BackwardConfig>().tma)
    GTEST_SKIP() << "no tensor-map encoder here: " << causal.plan.description;
  EXPECT_EQ(causal.plan.as<flashattn::BackwardConfig>().blockN, 96) << causal.plan.description;
  EXPECT_NE(causal.plan.description.find("tile 64x96"), std::string::npos) << causal.plan.description;
  AttnProblem ordered = p;
  ordered.deterministic = true;
  const Pick det = pick(kH100, ordered);
  EXPECT_EQ(det.plan.as<flashattn::BackwardConfig>().blockN, 96) << det.plan.description;
  AttnProblem plain = p;
  plain.mask = flashattn::Mask::None;
  EXPECT_EQ(pick(kH100, plain).plan.as<flashattn::BackwardConfig>().blockN, 96);
  AttnProblem capped = p;
  capped.softcap = 30.f;
  const Pick softcap = pick(kH100, capped);
  EXPECT_EQ(softcap.plan.kernel, KernelId::BackwardWgmma) << softcap.plan.description;
  EXPECT_EQ(softcap.plan.as<flashattn::BackwardConfig>().blockN, 64) << softcap.plan.description;
  EXPECT_EQ(causal.plan.workspaceBytes, softcap.plan.workspaceBytes);
}

TEST(Choosers, RefusalsNameTheArgument) {
  AttnProblem p = dense(Op::Forward, DType::BF16, 8, 8, 64, 64, 300);
  const Pick r = pick(kH100, p);
  EXPECT_FALSE(r.served);
  EXPECT_NE(r.why.find("headDim 300"), std::string::npos) << r.why;
  const Pick old =
      pick(fakeDevice("sm75 (fake)", 7, 5, 40, 65536, 75, 4), dense(Op::Forward, DType::BF16, 8, 8, 64, 64, 64));
  EXPECT_FALSE(old.served);
  EXPECT_NE(old.why.find("8.0"), std::string::npos) << old.why;
}

// The decode planner keeps to what the portable code was compiled with: on an H100 running compute_80 PTX there is
// no tensor-map loader and no cluster merge (their code is compiled out there, and planning them traps the kernel).
TEST(Choosers, DecodeFollowsTheCompiledArch) {
  AttnProblem p = dense(Op::DecodeChunk, DType::FP16, 8, 8, 2, 4096, 128);
  SKIP_UNLESS_BUILT_AT_LEAST(Family::Decode, FLASHATTN_DATA_FP16, 128);
  p.batch = 6;
  for (int chunks : {2, 64, 133}) {
    p.numChunks = chunks;
    const Pick r = pick(kH100Ptx80, p);
    ASSERT_TRUE(r.served) << r.why;
    EXPECT_EQ(r.plan.kernel, KernelId::DecodeSplitKv);
    const flashattn::DecodeConfig &c = r.plan.as<flashattn::DecodeConfig>();
    EXPECT_EQ(c.loader, 0) << "cp.async loader expected: " << r.plan.description;
    EXPECT_NE(c.merge, 2) << "no cluster merge from compute_80 code: " << r.plan.description;
    for (const DeviceInfo *dev : {&kA100, &kL4}) {
      const Pick q = pick(*dev, p);
      ASSERT_TRUE(q.served) << q.why;
      EXPECT_EQ(q.plan.as<flashattn::DecodeConfig>().loader, 0) << dev->name;
      EXPECT_NE(q.plan.as<flashattn::DecodeConfig>().merge, 2) << dev->name;
    }
  }
}

// The L4's 99 KB per block do not hold three cp.async stages of the 16-bit head dim 128 decode kernel (106 KB): it
// gets the two-stage variant, and fewer row tiles per CTA where two stages are still too many; the A100 keeps three.
TEST(Choosers, DecodeStagesFitTheDevice) {
  for (DType dtype : {DType::FP16, DType::BF16}) {
    AttnProblem p = dense(Op::DecodeChunk, dtype, 32, 8, 1, 8192, 128);
    if (partBuilt(Family::Decode, apiType(dtype), 128)) {
      const Pick l4 = pick(kL4, p);
      ASSERT_TRUE(l4.served) << l4.why;
      EXPECT_EQ(l4.plan.as<flashattn::DecodeConfig>().stages, 2) << l4.plan.description;
      EXPECT_EQ(l4.plan.as<flashattn::DecodeConfig>().loader, 0) << l4.plan.description;
      const Pick a100 = pick(kA100, p);
      ASSERT_TRUE(a100.served) << a100.why;
      EXPECT_EQ(a100.plan.as<flashattn::DecodeConfig>().stages, 3) << a100.plan.description;
    }
    // Head dim 64 fits three stages everywhere.
    if (partBuilt(Family::Decode, apiType(dtype), 64)) {
      const Pick narrow = pick(kL4, dense(Op::DecodeChunk, dtype, 32, 8, 1, 8192, 64));
      ASSERT_TRUE(narrow.served) << narrow.why;
      EXPECT_EQ(narrow.plan.as<flashattn::DecodeConfig>().stages, 3) << narrow.plan.description;
    }
  }
  // FP32 head dim 128, 64 rows per KV head (GQA 8, 8 tokens): two stages and four row tiles still take 100 KB, so a
  // CTA takes two of them on the L4; the A100 keeps four.
  if (!partBuilt(Family::Decode, FLASHATTN_DATA_FP32, 128)) return;
  const AttnProblem wide = dense(Op::DecodeChunk, DType::FP32, 32, 4, 8, 4096, 128);
  const Pick l4 = pick(kL4, wide);
  ASSERT_TRUE(l4.served) << l4.why;
  EXPECT_EQ(l4.plan.as<flashattn::DecodeConfig>().stages, 2) << l4.plan.description;
  EXPECT_EQ(l4.plan.as<flashattn::DecodeConfig>().rowTileCap, 2) << l4.plan.description;
  EXPECT_NE(l4.plan.description.find("2 x 16-row tiles"), std::string::npos) << l4.plan.description;
  const Pick a100 = pick(kA100, wide);
  ASSERT_TRUE(a100.served) << a100.why;
  EXPECT_EQ(a100.plan.as<flashattn::DecodeConfig>().rowTileCap, 0) << a100.plan.description;
  EXPECT_NE(a100.plan.description.find("4 x 16-row tiles"), std::string::npos) << a100.plan.description;
}

// The Hopper wgmma decode: absorbed MLA (576/512) and multi-token decode from 16 rows per KV head at head dim 128.
// Without a driver (CI) the family cannot encode its tensor maps and says so; the split-KV decode then takes the
// head dim 128 problems, and nothing takes 576/512.
TEST(Choosers, WgmmaDecodeOnHopper) {
  if (flashattn::cuda::findFamily(KernelId::DecodeWgmma) == nullptr || flashattn::cuda::portableOnly())
    GTEST_SKIP() << "this build has no sm90 wgmma decode (or FLASHATTN_KERNEL_FAMILIES=portable)";
  SKIP_UNLESS_BUILT(Family::DecodeSm90, FLASHATTN_DATA_BF16, 128);
  auto noMaps = [](const std::string &text) { return text.find("no tensor map") != std::string::npos; };
  // 4 query tokens of GQA 4: 16 rows per KV head.
  const AttnProblem multi = dense(Op::DecodeChunk, DType::BF16, 32, 8, 4, 65536, 128);
  const Pick m = pick(kH100, multi);
  ASSERT_TRUE(m.served) << m.why;
  if (m.plan.kernel == KernelId::DecodeWgmma) {
    EXPECT_NE(m.plan.description.find("64-row blocks"), std::string::npos) << m.plan.description;
  } else {
    EXPECT_EQ(m.plan.kernel, KernelId::DecodeSplitKv);
    EXPECT_TRUE(noMaps(m.plan.description)) << m.plan.description;
  }
  // 2 tokens (8 rows) stay with the split-KV decode, and so does every GPU before sm90.
  const Pick few = pick(kH100, dense(Op::DecodeChunk, DType::BF16, 32, 8, 2, 65536, 128));
  ASSERT_TRUE(few.served) << few.why;
  EXPECT_EQ(few.plan.kernel, KernelId::DecodeSplitKv) << few.plan.description;
  const Pick a100 = pick(kA100, multi);
  ASSERT_TRUE(a100.served) << a100.why;
  EXPECT_EQ(a100.plan.kernel, KernelId::DecodeSplitKv) << a100.plan.description;

  // Absorbed MLA, one KV head: 16 heads take the narrow kernel, 128 heads 64-row blocks.
  SKIP_UNLESS_BUILT(Family::DecodeSm90, FLASHATTN_DATA_BF16, 576, 512);
  AttnProblem mla = withHeadDimV(dense(Op::DecodeChunk, DType::BF16, 16, 1, 1, 32768, 576), 512);
  const Pick narrow = pick(kH100, mla);
  if (narrow.served) {
    EXPECT_EQ(narrow.plan.kernel, KernelId::DecodeWgmma);
    EXPECT_NE(narrow.plan.description.find("narrow"), std::string::npos) << narrow.plan.description;
    mla.heads = 128;
    const Pick wide = pick(kH100, mla);
    ASSERT_TRUE(wide.served) << wide.why;
    EXPECT_NE(wide.plan.description.find("2 x 64-row blocks"), std::string::npos) << wide.plan.description;
  } else {
    EXPECT_TRUE(noMaps(narrow.why)) << narrow.why;
  }
  // Softcap is not served there: the refusal names it beside the forward's head-dim reason.
  AttnProblem capped = mla;
  capped.softcap = 30.f;
  const Pick c = pick(kH100, capped);
  EXPECT_FALSE(c.served);
  EXPECT_NE(c.why.find("softcap"), std::string::npos) << c.why;
  // No sm90, no kernel: the refusal names the head dim.
  const Pick old = pick(kA100, mla);
  EXPECT_FALSE(old.served);
  EXPECT_NE(old.why.find("576"), std::string::npos) << old.why;
}

TEST(Choosers, WorkspaceRegionsAreDisjointAndCovered) {
  AttnProblem d = dense(Op::DecodeChunk, DType::BF16, 32, 8, 1, 8192, 128);
  d.numChunks = 16;
  AttnProblem b = dense(Op::Backward, DType::BF16, 8, 8, 300, 300, 64);
  b.deterministic = true;
  AttnProblem sinks = b;  // with dSinks: the partial sums' region too
  float fakeSinks[8], fakeDSinks[8];
  sinks.sinks = fakeSinks;
  sinks.dSinks = fakeDSinks;
  for (const AttnProblem &p : {d, b, sinks}) {
    const Family family = p.op == Op::Backward ? Family::Backward : Family::Decode;
    if (!partBuiltAtLeast(family, apiType(p.dtype), p.headDim)) continue;
    const Pick r = pick(kA100, p);
    ASSERT_TRUE(r.served) << r.why;
    std::size_t end = 0;
    for (const flashattn::WorkspaceRegion &region : r.plan.regions) {
      if (region.name == nullptr) continue;
      EXPECT_GE(region.offset, end) << region.name;
      EXPECT_EQ(region.offset % flashattn::kWorkspaceAlignment, 0u) << region.name;
      end = region.offset + region.bytes;
    }
    EXPECT_LE(end, r.plan.workspaceBytes);
    EXPECT_GT(end, 0u);
  }
}

}  // namespace
