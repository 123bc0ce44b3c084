// SPDX-License-Identifier: BSD-3-Clause
// flashAttnDecodeChunk on the CUDA backend through the public API, against the float64 oracle (fa_ref::forward over
// each sequence's used KV length) under both test gates: the decode grid ((seqQ, seqK) x chunk counts), dense
// and paged caches (page sizes 1..256, block tables from a random permutation), NaN written into every unused cache
// slot and unreferenced page, odd per-sequence lengths including 0, FP16/BF16/FP32 and head dims 64..256 (padded ones
// included), GQA/MQA and stride-0 KV broadcast, masks, windows, softcap, ALiBi, the edges of the sm90 tensor-map loader
// (padded columns, partial last tiles over NaN slots, caches shorter than a copy box); outputs poisoned with NaN first.
// Plus: out-of-range block ids are masked (never dereferenced), determinism, graph replay with lengths and block
// tables changed in device memory between replays equal to eager runs, exact workspace sizes, and DecodeChunk past 16
// query tokens, which runs as (and equals) flashAttnForward.
//
// FLASHATTN_TEST_SLICE=edge runs a few small shapes only (for compute-sanitizer). A case whose instances this build
// left out (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS) skips (notBuiltFor).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

using namespace fa_test;

namespace {


struct DecodeCase {
  std::string name;
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t headDim = 128;
  int64_t headDimV = 0;  // of V and O; 0: the same as headDim
  int64_t batch = 1, heads = 6, kvHeads = 2, sq = 1;
  int64_t cap = 128;               // dense seqK; paged: rounded up to whole pages
  std::vector<int32_t> lens;       // per-sequence used lengths; empty: the whole cache, no seqlensK
  bool paged = false;
  int64_t pageSize = 16;
  std::vector<int32_t> chunks = {0};
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  int64_t windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  int alibi = 0;  // 0 off, 1 [heads], 2 [batch, heads]
  bool sinks = false;  // one attention sink per query head, some above every logit of its rows
  Order order = Order::BHSD;
  bool nanFill = true;      // NaN in every cache slot no sequence uses
  bool badBlockId = false;  // the last used page of sequence 0 gets an out-of-range id: its keys are masked
  bool withLse = true;
  bool broadcastKv = false;  // kvHeads == heads with K/V head stride 0
  int64_t kvRowPad = 0;      // dense caches: unused elements after each K/V row (odd values: strides the kernels stage)
  double inputScale = 1.0;
  float scale = 0.f;  // 0: the default 1/sqrt(headDim)
  uint64_t seed = 1;
  int64_t dimV() const { return headDimV > 0 ? headDimV : headDim; }
};

// What this build lacks for the case, "" when nothing: a split-KV decode instance and a forward one (DecodeChunk past
// 16 query tokens, and at head dims the split-KV kernels do not take, is the forward) as wide as its head dims, of its
// storage type (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS).
std::string notBuiltFor(const DecodeCase &c) {
  const std::string forward = notBuiltAtLeast(Family::Forward, c.dtype, c.headDim, c.dimV());
  return forward.empty() ? notBuiltAtLeast(Family::Decode, c.dtype, c.headDim, c.dimV()) : forward;
}

// Everything one case needs on the host and the device, plus its descriptors.
class DecodeFixture {
 public:
  DecodeFixture(const DecodeCase &c) : c_(c) { build(); }

  flashAttnStatus_t run(int32_t chunks, size_t *workspaceUsed = nullptr, size_t workspaceShort = 0) {
    size_t bytes = 0;
    flashAttnStatus_t s = flashAttnDecodeChunkGetWorkspaceSize(handle_, attn_, seqDesc(), qDesc_, kDesc_, vDesc_,
                                                                oDesc_, lseDescOrNull(), chunks, &bytes);
    if (s != FLASHATTN_STATUS_SUCCESS) return s;
    if (workspaceUsed) *workspaceUsed = bytes;
    // One workspace per case, kept across its calls as a decode loop keeps it: the first call on it finds 0xFF bytes
    // (any contents must do), later ones what the previous call of whatever plan left (the fused merge's counts).
    if (ws_.bytes < bytes) {
      ws_ = DeviceBuffer(bytes);
      ws_.poison();
    }
    s = flashAttnDecodeChunk(handle_, attn_, seqDesc(), qDesc_, q_.ptr, kDesc_, k_.ptr, vDesc_, v_.ptr, oDesc_, o_.ptr,
                             lseDescOrNull(), c_.withLse ? lse_.get<float>() : nullptr, chunks, ws_.ptr,
                             bytes - std::min(bytes, workspaceShort));
    if (s == FLASHATTN_STATUS_SUCCESS) FA_CUDA_CHECK(cudaDeviceSynchronize());
    return s;
  }

  void poisonOutputs() {
    o_.poison();
    lse_.poison();
  }
  std::vector<uint8_t> rawO() const { return o_.raw(); }
  std::vector<uint8_t> rawLse() const { return lse_.raw(); }

  // Both gates on O, the LSE gate, and finiteness. Returns a description; sets *pass.
  std::string check(bool *pass) {
    HostTensor o = oHost_;
    o_.download(o);
    const std::vector<double> out = unpack4(o);
    const fa_ref::Gate g = fa_ref::checkGates(out, oRef_, oLp_, 2.0, fa_ref::normTolerance(roundingOf(c_.dtype)));
    *pass = g.pass;
    std::string text = "O " + g.describe();
    if (c_.withLse) {
      std::vector<float> l(size_t(c_.batch * c_.heads * c_.sq));
      FA_CUDA_CHECK(cudaMemcpy(l.data(), lse_.ptr, l.size() * 4, cudaMemcpyDeviceToHost));
      // fa_test::lseTolerance: 1e-4, or 8e-6 of the magnitude for FP16/BF16 (1.09e-4 was measured on H200 with x5
      // inputs, paged cache).
      const fa_ref::Gate gl = fa_ref::checkLse(std::vector<double>(l.begin(), l.end()), lseRef_,
                                               fa_test::lseTolerance(c_.dtype, lseRef_));
      *pass = *pass && gl.pass;
      text += "; LSE " + gl.describe();
    }
    return text;
  }

  // Graph tests: replace the used lengths (and the block table) in device memory.
  void setIndexData(const std::vector<int32_t> &lens, const std::vector<int32_t> &table) {
    FA_CUDA_CHECK(cudaMemcpy(lens_.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    if (c_.paged) FA_CUDA_CHECK(cudaMemcpy(table_.ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  }
  const std::vector<int32_t> &lens() const { return lensHost_; }
  const std::vector<int32_t> &table() const { return tableHost_; }
  int64_t pagesPerSeq() const { return pagesPerSeq_; }

  flashAttnHandle_t handle() const { return handle_; }
  flashAttnAttentionDescriptor_t attn() const { return attn_; }
  flashAttnSeqDescriptor_t seqDesc() const { return useSeq_ ? flashAttnSeqDescriptor_t(seq_) : nullptr; }
  flashAttnTensorDescriptor_t lseDescOrNull() const { return c_.withLse ? flashAttnTensorDescriptor_t(lseDesc_) : nullptr; }
  flashAttnTensorDescriptor_t q() const { return qDesc_; }
  flashAttnTensorDescriptor_t k() const { return kDesc_; }
  flashAttnTensorDescriptor_t v() const { return vDesc_; }
  flashAttnTensorDescriptor_t o() const { return oDesc_; }
  const void *qPtr() const { return q_.ptr; }
  const void *kPtr() const { return k_.ptr; }
  const void *vPtr() const { return v_.ptr; }
  void *oPtr() const { return o_.ptr; }
  float *lsePtr() const { return c_.withLse ? lse_.get<float>() : nullptr; }

 private:
  DeviceBuffer ws_;

  void build() {
    const DecodeCase &c = c_;
    std::mt19937_64 rng(c.seed);
    const int64_t dataKv = c.broadcastKv ? 1 : c.kvHeads;
    pagesPerSeq_ = c.paged ? (c.cap + c.pageSize - 1) / c.pageSize : 0;
    const int64_t capacity = c.paged ? pagesPerSeq_ * c.pageSize : c.cap;
    useSeq_ = !c.lens.empty() || c.paged;
    lensHost_.assign(size_t(c.batch), int32_t(capacity));
    if (!c.lens.empty()) lensHost_ = c.lens;

    const std::vector<double> q = randomValues(rng, size_t(c.batch * c.heads * c.sq * c.headDim), c.dtype, c.inputScale);
    const std::vector<double> k = randomValues(rng, size_t(c.batch * dataKv * capacity * c.headDim), c.dtype, c.inputScale);
    const int64_t dimV = c.dimV();
    const std::vector<double> v = randomValues(rng, size_t(c.batch * dataKv * capacity * dimV), c.dtype, 1.0);

    fa_ref::Problem rp;
    rp.batch = c.batch, rp.heads = c.heads, rp.kvHeads = dataKv, rp.headDim = c.headDim, rp.headDimV = dimV;
    rp.maxSq = c.sq, rp.maxSk = capacity;
    rp.sk.assign(lensHost_.begin(), lensHost_.end());
    rp.scale = c.scale;
    rp.softcap = c.softcap;
    rp.mask = fa_ref::Mask(int(c.mask));
    rp.windowLeft = c.windowLeft, rp.windowRight = c.windowRight;
    std::vector<float> slopes;
    if (c.alibi) {
      std::uniform_real_distribution<double> u(0.01, 0.5);
      slopes.resize(size_t(c.alibi == 2 ? c.batch * c.heads : c.heads));
      for (auto &s : slopes) s = float(u(rng));
      rp.alibi.assign(slopes.begin(), slopes.end());
    }
    std::vector<float> sinks;
    if (c.sinks) {
      std::uniform_real_distribution<double> u(-3.0, 3.0);
      for (int64_t h = 0; h < c.heads; ++h) sinks.push_back(float(h % 4 == 3 ? 40.0 : u(rng)));
      rp.sinks.assign(sinks.begin(), sinks.end());
    }

    const int64_t numPages = c.paged ? c.batch * pagesPerSeq_ + 3 : 0;  // 3 pages no table row references
    if (c.paged) {
      std::vector<int32_t> perm(static_cast<size_t>(numPages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      tableHost_.assign(size_t(c.batch * pagesPerSeq_), 0);
      for (int64_t s = 0; s < c.batch; ++s)
        for (int64_t pg = 0; pg < pagesPerSeq_; ++pg) {
          const bool used = pg * c.pageSize < lensHost_[size_t(s)];
          // Entries past the used length are garbage the kernel must never dereference.
          tableHost_[size_t(s * pagesPerSeq_ + pg)] =
              used ? perm[size_t(s * pagesPerSeq_ + pg)] : int32_t(pg % 2 ? -7 : numPages + 5);
        }
      if (c.badBlockId && lensHost_[0] > 0) {
        const int64_t last = (lensHost_[0] - 1) / c.pageSize;
        tableHost_[size_t(last)] = int32_t(numPages + 1);
        rp.sk[0] = last * c.pageSize;  // the masked page's keys drop out of sequence 0
      }
    }
    referenceForwardByKvGroup(rp, q, k, v, oRef_, lseRef_, fa_ref::Rounding::None);
    std::vector<double> lseLp;
    referenceForwardByKvGroup(rp, q, k, v, oLp_, lseLp, roundingOf(c.dtype));

    // Device tensors, one cudaMalloc each so compute-sanitizer sees any overrun.
    const HostTensor qh = pack4(q, c.dtype, c.batch, c.heads, c.sq, c.headDim, c.order);
    q_ = DeviceBuffer(qh);
    oHost_ = pack4(std::vector<double>(size_t(c.batch * c.heads * c.sq * dimV), 0.0), c.dtype, c.batch, c.heads, c.sq,
                   dimV, c.order);
    o_ = DeviceBuffer(oHost_.bytes.size());
    lse_ = DeviceBuffer(size_t(c.batch * c.heads * c.sq * 4));
    expectOk(qDesc_.set(c.dtype, qh.dims, qh.strides));
    expectOk(oDesc_.set(c.dtype, oHost_.dims, oHost_.strides));
    expectOk(lseDesc_.set(FLASHATTN_DATA_FP32, {c.batch, c.heads, c.sq}, {c.heads * c.sq, c.sq, 1}));

    const double nan = std::nan("");
    if (!c.paged) {
      auto cache = [&](int64_t width) {
        const int64_t pitch = width + c.kvRowPad;
        return HostTensor(c.dtype, {c.batch, dataKv, capacity, width},
                          c.kvRowPad > 0 ? std::vector<int64_t>{dataKv * capacity * pitch, capacity * pitch, pitch, 1}
                                         : stridesFor(c.order, c.batch, dataKv, capacity, width));
      };
      HostTensor kh = cache(c.headDim), vh = cache(dimV);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < dataKv; ++h)
          for (int64_t j = 0; j < capacity; ++j) {
            const bool unused = c.nanFill && j >= lensHost_[size_t(b)];
            for (int64_t d = 0; d < c.headDim; ++d)
              kh.set({b, h, j, d}, unused ? nan : k[size_t(((b * dataKv + h) * capacity + j) * c.headDim + d)]);
            for (int64_t d = 0; d < dimV; ++d)
              vh.set({b, h, j, d}, unused ? nan : v[size_t(((b * dataKv + h) * capacity + j) * dimV + d)]);
          }
      k_ = DeviceBuffer(kh);
      v_ = DeviceBuffer(vh);
      for (HostTensor *t : {&kh, &vh}) {
        std::vector<int64_t> dims = t->dims, strides = t->strides;
        if (c.broadcastKv) dims[1] = c.heads, strides[1] = 0;
        expectOk((t == &kh ? kDesc_ : vDesc_).set(c.dtype, dims, strides));
      }
    } else {
      auto pool = [&](int64_t width) {
        HostTensor t(c.dtype, {numPages, c.pageSize, dataKv, width},
                     {c.pageSize * dataKv * width, dataKv * width, width, 1});
        t.fillNaN();
        return t;
      };
      HostTensor kh = pool(c.headDim), vh = pool(dimV);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t j = 0; j < lensHost_[size_t(b)]; ++j) {
          const int32_t id = tableHost_[size_t(b * pagesPerSeq_ + j / c.pageSize)];
          if (id < 0 || id >= numPages) continue;
          for (int64_t h = 0; h < dataKv; ++h) {
            for (int64_t d = 0; d < c.headDim; ++d)
              kh.set({id, j % c.pageSize, h, d}, k[size_t(((b * dataKv + h) * capacity + j) * c.headDim + d)]);
            for (int64_t d = 0; d < dimV; ++d)
              vh.set({id, j % c.pageSize, h, d}, v[size_t(((b * dataKv + h) * capacity + j) * dimV + d)]);
          }
        }
      k_ = DeviceBuffer(kh);
      v_ = DeviceBuffer(vh);
      for (HostTensor *t : {&kh, &vh}) {
        std::vector<int64_t> dims = t->dims, strides = t->strides;
        if (c.broadcastKv) dims[2] = c.heads, strides[2] = 0;
        expectOk((t == &kh ? kDesc_ : vDesc_).set(c.dtype, dims, strides));
      }
      table_ = DeviceBuffer(tableHost_.data(), tableHost_.size() * 4);
      expectOk(flashAttnSetSeqPaged(seq_, c.batch, table_.get<int32_t>(), pagesPerSeq_));
    }
    if (useSeq_) {
      lens_ = DeviceBuffer(lensHost_.data(), lensHost_.size() * 4);
      expectOk(flashAttnSetSeqKvLengths(seq_, c.batch, lens_.get<int32_t>()));
    }
    if (c.scale > 0) expectOk(flashAttnSetAttentionScale(attn_, c.scale));
    expectOk(flashAttnSetAttentionMask(attn_, c.mask));
    expectOk(flashAttnSetAttentionWindow(attn_, c.windowLeft, c.windowRight));
    expectOk(flashAttnSetAttentionSoftcap(attn_, c.softcap));
    if (c.alibi) {
      slopes_ = DeviceBuffer(slopes.data(), slopes.size() * 4);
      expectOk(flashAttnSetAttentionAlibiSlopes(attn_, slopes_.get<float>(), c.alibi == 2 ? 1 : 0));
    }
    if (c.sinks) {
      sinks_ = DeviceBuffer(sinks.data(), sinks.size() * 4);
      expectOk(flashAttnSetAttentionSinks(attn_, sinks_.get<float>()));
    }
  }

  static void expectOk(flashAttnStatus_t s) {
    if (s != FLASHATTN_STATUS_SUCCESS) throw std::runtime_error("descriptor setup failed: " + lastError());
  }

  DecodeCase c_;
  Handle handle_{FLASHATTN_BACKEND_CUDA};
  AttnDesc attn_;
  SeqDesc seq_;
  TensorDesc qDesc_, kDesc_, vDesc_, oDesc_, lseDesc_;
  DeviceBuffer q_, k_, v_, o_, lse_, lens_, table_, slopes_, sinks_;
  HostTensor oHost_;
  std::vector<double> oRef_, lseRef_, oLp_;
  std::vector<int32_t> lensHost_, tableHost_;
  int64_t pagesPerSeq_ = 0;
  bool useSeq_ = false;
};

std::vector<int32_t> oddLengths(int64_t batch, int64_t cap, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> u(1, int32_t(cap));
  std::vector<int32_t> l(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) l[size_t(i)] = i == 1 ? 0 : (u(rng) | 1);
  if (batch > 2) l[2] = int32_t(cap);
  return l;
}

std::vector<DecodeCase> gridCases() {
  std::vector<DecodeCase> cases;
  uint64_t seed = 100;
  if (edgeSliceOnly()) {
    DecodeCase a;
    a.name = "edge_paged_ps8", a.batch = 3, a.cap = 100, a.paged = true, a.pageSize = 8, a.lens = {37, 0, 100};
    a.sq = 2, a.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, a.chunks = {0, 3}, a.seed = seed++;
    cases.push_back(a);
    DecodeCase b;
    b.name = "edge_dense_lengths", b.batch = 2, b.cap = 200, b.lens = {199, 5}, b.chunks = {5}, b.seed = seed++;
    cases.push_back(b);
    DecodeCase f;
    f.name = "edge_fp32_d64", f.dtype = FLASHATTN_DATA_FP32, f.headDim = 64, f.cap = 90, f.chunks = {0, 2}, f.seed = seed++;
    cases.push_back(f);
    DecodeCase bad;
    bad.name = "edge_bad_block_id", bad.batch = 2, bad.cap = 64, bad.paged = true, bad.lens = {50, 33};
    bad.badBlockId = true, bad.seed = seed++;
    cases.push_back(bad);
    // Pages of 16 as four pieces of the tensor loader's tile (FLASHATTN_DECODE_LOADER=tensor takes them on short
    // chunks), a partial last page over NaN slots.
    DecodeCase pc;
    pc.name = "edge_paged_ps16_pieces", pc.batch = 2, pc.cap = 300, pc.paged = true, pc.pageSize = 16;
    pc.lens = {300, 57}, pc.sq = 2, pc.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, pc.chunks = {0, 2}, pc.seed = seed++;
    cases.push_back(pc);
    // From 16 rows per KV head on sm90, the wgmma decode: chunks of several tiles, one tile (its second warpgroup
    // without a tile of its own) and none, a partial last tile over NaN slots; sinks; pages of 64; pairs of chunks
    // merged in a cluster.
    DecodeCase g;
    g.name = "edge_wgmma_sq8_sinks", g.batch = 3, g.heads = 8, g.kvHeads = 2, g.sq = 8, g.cap = 300;
    g.lens = {299, 0, 5}, g.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, g.sinks = true, g.chunks = {0, 1, 2, 3};
    g.seed = seed++;
    cases.push_back(g);
    DecodeCase gp = g;
    gp.name = "edge_wgmma_sq4_paged_ps64", gp.sq = 4, gp.sinks = false, gp.paged = true, gp.pageSize = 64;
    gp.lens = {300, 129, 64}, gp.seed = seed++;
    cases.push_back(gp);
    return cases;
  }
  // The decode grid (docs/testing.md): (seqQ, seqK) x chunk counts, heads/kvHeads rotating over (6,6), (6,2), (6,1).
  const int64_t shapes[][2] = {{1, 128}, {1, 339}, {3, 799}, {16, 20000}, {1, 131072}};
  const int64_t kv[] = {6, 2, 1};
  int rot = 0;
  for (const auto &s : shapes) {
    DecodeCase c;
    c.sq = s[0], c.cap = s[1], c.kvHeads = kv[rot++ % 3];
    c.name = "grid_sq" + std::to_string(c.sq) + "_sk" + std::to_string(c.cap) + "_kv" + std::to_string(c.kvHeads);
    c.mask = c.sq > 1 ? FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT : FLASHATTN_MASK_NONE;
    c.chunks = {0, 1, 2, 3, 5, 17, 55, 133};
    c.seed = seed++;
    cases.push_back(c);
  }
  for (flashAttnDataType_t t : {FLASHATTN_DATA_FP16, FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP32})
    for (int64_t d : {64, 96, 128, 192, 256, 72, 200}) {
      DecodeCase c;
      c.name = std::string("dims_") + typeName(t) + "_d" + std::to_string(d);
      c.dtype = t, c.headDim = d, c.batch = 3, c.sq = 2, c.cap = 300, c.kvHeads = kv[rot++ % 3];
      c.lens = oddLengths(3, 300, seed), c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.chunks = {0, 3};
      c.seed = seed++;
      cases.push_back(c);
    }
  for (int64_t ps : {1, 8, 16, 64, 256})
    for (flashAttnDataType_t t : {FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16}) {
      DecodeCase c;
      c.name = std::string("paged_ps") + std::to_string(ps) + "_" + typeName(t);
      c.dtype = t, c.batch = 3, c.heads = 8, c.kvHeads = 2, c.cap = 700, c.paged = true, c.pageSize = ps;
      c.sq = t == FLASHATTN_DATA_BF16 ? 1 : 4, c.lens = oddLengths(3, 700, seed);
      c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.chunks = {0, 4}, c.seed = seed++;
      cases.push_back(c);
    }
  // Pages shorter than the tensor loader's key tile (FLASHATTN_DECODE_LOADER=tensor takes them on short chunks) come
  // as pieces of a tile, one copy per page and 64-column box: two pieces of the 32-key tile at d192, and the columns
  // past 120 of the 128-wide kernel zero-filled; NaN past each sequence's end.
  for (int64_t d : {120, 192}) {
    DecodeCase c;
    c.name = "paged_pieces_d" + std::to_string(d) + "_ps16", c.headDim = d, c.batch = 3, c.heads = 8, c.kvHeads = 2;
    c.cap = 700, c.paged = true, c.pageSize = 16, c.sq = 2, c.lens = {700, 17, 333};
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.chunks = {0, 1, 3}, c.seed = seed++;
    cases.push_back(c);
  }
  auto feature = [&](const std::string &name, auto tweak) {
    for (bool paged : {false, true}) {
      DecodeCase c;
      c.name = name + (paged ? "_paged" : "_dense");
      c.batch = 2, c.heads = 8, c.kvHeads = 2, c.sq = 4, c.cap = 900, c.paged = paged, c.pageSize = 32;
      c.lens = {899, 431}, c.chunks = {0, 5}, c.seed = seed++;
      tweak(c);
      cases.push_back(c);
    }
  };
  feature("softcap", [](DecodeCase &c) { c.softcap = 5.f, c.inputScale = 3; });
  feature("alibi_heads", [](DecodeCase &c) { c.alibi = 1, c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT; });
  feature("alibi_batch", [](DecodeCase &c) { c.alibi = 2; });
  feature("sinks", [](DecodeCase &c) { c.sinks = true, c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT; });
  feature("sinks_empty_rows", [](DecodeCase &c) {
    c.sinks = true, c.sq = 16, c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT, c.lens = {899, 0};
  });
  feature("sinks_fp32_chunks", [](DecodeCase &c) { c.sinks = true, c.dtype = FLASHATTN_DATA_FP32, c.headDim = 64; });
  feature("window_100_0", [](DecodeCase &c) { c.windowLeft = 100, c.windowRight = 0; });
  feature("window_37_3", [](DecodeCase &c) { c.windowLeft = 37, c.windowRight = 3; });
  feature("causal_top_left", [](DecodeCase &c) { c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT, c.lens = {899, 2}; });
  feature("masked_rows_sq16", [](DecodeCase &c) { c.sq = 16, c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.lens = {5, 431}; });
  feature("scale_input_x5", [](DecodeCase &c) { c.scale = 0.3f, c.inputScale = 5; });
  feature("no_lse", [](DecodeCase &c) { c.withLse = false; });
  feature("bshd", [](DecodeCase &c) { c.order = Order::BSHD; });
  feature("mqa_h32_sq16", [](DecodeCase &c) { c.heads = 32, c.kvHeads = 1, c.sq = 16; });
  feature("gqa_h24_sq2", [](DecodeCase &c) { c.heads = 24, c.kvHeads = 1, c.sq = 2; });
  {
    DecodeCase c;
    c.name = "broadcast_kv_stride0", c.batch = 2, c.heads = 6, c.kvHeads = 6, c.broadcastKv = true, c.sq = 3;
    c.cap = 257, c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.chunks = {0, 2}, c.seed = seed++;
    cases.push_back(c);
    DecodeCase p = c;
    p.name = "broadcast_kv_stride0_paged", p.paged = true, p.lens = {200, 257}, p.seed = seed++;
    cases.push_back(p);
  }
  {
    // Edges of the sm90 tensor-map loader (dense FP16/BF16): head dim 40 on the 64-wide kernel with BSHD strides
    // (columns 40..63 of each copied box lie past the row and must arrive as zeros), NaN in the unused slots of the last
    // partial tile; and a cache shorter than one 64-key copy box.
    DecodeCase c;
    c.name = "tail_d40_bshd_fp16", c.dtype = FLASHATTN_DATA_FP16, c.headDim = 40, c.batch = 3, c.heads = 8;
    c.kvHeads = 2, c.cap = 300, c.order = Order::BSHD, c.lens = {300, 0, 77}, c.chunks = {0, 1, 3}, c.seed = seed++;
    cases.push_back(c);
    DecodeCase d;
    d.name = "cache_shorter_than_tile", d.batch = 2, d.heads = 8, d.kvHeads = 2, d.sq = 2, d.cap = 40;
    d.lens = {33, 40}, d.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, d.chunks = {0, 1, 2}, d.seed = seed++;
    cases.push_back(d);
    // The producer-warp loader's views: head dim 120 on the 128-wide kernel (no whole-row view: 64-column boxes, the
    // columns past 120 zero), and whole 256-column rows of a BSHD cache in one copy (the boxes' dimension beside a
    // head stride smaller than the key stride), both with NaN past each sequence's end.
    DecodeCase e;
    e.name = "tail_d120_boxes_bf16", e.headDim = 120, e.batch = 2, e.heads = 8, e.kvHeads = 2, e.cap = 300;
    e.lens = {300, 129}, e.chunks = {0, 1, 3}, e.seed = seed++;
    cases.push_back(e);
    DecodeCase w;
    w.name = "wide_d256_bshd_bf16", w.headDim = 256, w.batch = 3, w.heads = 8, w.kvHeads = 2, w.cap = 300;
    w.order = Order::BSHD, w.lens = {231, 0, 300}, w.chunks = {0, 2}, w.seed = seed++;
    cases.push_back(w);
  }
  {
    DecodeCase c;
    c.name = "bad_block_id_masked", c.batch = 3, c.cap = 300, c.paged = true, c.lens = {150, 77, 300};
    c.badBlockId = true, c.chunks = {0, 1, 3}, c.seed = seed++;
    cases.push_back(c);
    // The bad page past the first Stages key tiles of a chunk, where the loaders read table entries from their ring
    // of page ids (one chunk: eleven 64-key tiles), at pages of 1 (cp.async) and 16 (tensor maps where they serve).
    for (int64_t pageSize : {1, 16}) {
      DecodeCase r;
      r.name = "bad_block_id_ring_ps" + std::to_string(pageSize), r.batch = 2, r.cap = 1024, r.paged = true;
      r.pageSize = pageSize, r.lens = {700, 300}, r.badBlockId = true, r.chunks = {1, 2}, r.seed = seed++;
      cases.push_back(r);
    }
  }
  // Past 16 query tokens DecodeChunk runs as the forward: dense and paged caches (page sizes 1, 3, 256), GQA 1/4/8,
  // lengths 0 and past the query count, FP32 too.
  {
    const struct {
      const char *name;
      int64_t sq, pageSize, heads, kvHeads;
      flashAttnDataType_t dtype;
      bool paged;
    } longChunks[] = {{"long_sq17_dense_bf16", 17, 0, 8, 8, FLASHATTN_DATA_BF16, false},
                      {"long_sq17_paged_ps3_fp16", 17, 3, 8, 2, FLASHATTN_DATA_FP16, true},
                      {"long_sq64_paged_ps1_bf16", 64, 1, 8, 1, FLASHATTN_DATA_BF16, true},
                      {"long_sq200_paged_ps256_fp16", 200, 256, 8, 2, FLASHATTN_DATA_FP16, true},
                      {"long_sq40_dense_fp32", 40, 0, 4, 1, FLASHATTN_DATA_FP32, false}};
    for (const auto &l : longChunks) {
      DecodeCase c;
      c.name = l.name, c.dtype = l.dtype, c.batch = 3, c.heads = l.heads, c.kvHeads = l.kvHeads, c.sq = l.sq;
      c.headDim = l.dtype == FLASHATTN_DATA_FP32 ? 64 : 128;
      c.cap = 700, c.paged = l.paged, c.pageSize = l.pageSize > 0 ? l.pageSize : 16;
      c.lens = {700, 0, int32_t(l.sq + 5)}, c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.chunks = {0, 7};
      c.seed = seed++;
      cases.push_back(c);
    }
  }
  return cases;
}

std::string caseName(const ::testing::TestParamInfo<DecodeCase> &info) { return info.param.name; }

class DecodeGrid : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeGrid, MatchesFloat64OracleAndIsDeterministic) {
  const DecodeCase &c = GetParam();
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  DecodeFixture f(c);
  for (int32_t chunks : c.chunks) {
    SCOPED_TRACE("chunks " + std::to_string(chunks));
    f.poisonOutputs();
    const flashAttnStatus_t status = f.run(chunks);
    ASSERT_EQ(status, FLASHATTN_STATUS_SUCCESS) << lastError();
    bool pass = false;
    const std::string text = f.check(&pass);
    EXPECT_TRUE(pass) << c.name << " chunks " << chunks << ": " << text;
    const std::vector<uint8_t> o1 = f.rawO(), l1 = f.rawLse();
    f.poisonOutputs();
    ASSERT_EQ(f.run(chunks), FLASHATTN_STATUS_SUCCESS) << lastError();
    EXPECT_TRUE(f.rawO() == o1) << "O differs between two runs";
    if (c.withLse) {
      EXPECT_TRUE(f.rawLse() == l1) << "LSE differs between two runs";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, DecodeGrid, ::testing::ValuesIn(gridCases()), caseName);

// The case that trapped (and lost the CUDA context) in a build whose only code was compute_80 PTX, run on an H200:
// the planner picked the sm90 cluster merge by the device, not by the code. Now every build plans only what its code
// has (bench/device_run.sh runs this suite in such a build too); in any build the results must pass the oracle.
TEST(DecodeSupport, PlansOnlyWhatTheCodeWasCompiledFor) {
  DecodeCase c;
  c.name = "fp16_d256_b6_h8_sq2";
  c.dtype = FLASHATTN_DATA_FP16;
  c.headDim = 256;
  c.batch = 6, c.heads = 8, c.kvHeads = 8, c.sq = 2, c.cap = 4500;
  c.chunks = {64, 133};
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  DecodeFixture f(c);
  for (int32_t chunks : c.chunks) {
    SCOPED_TRACE("chunks " + std::to_string(chunks));
    f.poisonOutputs();
    const flashAttnStatus_t status = f.run(chunks);
    ASSERT_EQ(status, FLASHATTN_STATUS_SUCCESS) << lastError();
    bool pass = false;
    const std::string text = f.check(&pass);
    EXPECT_TRUE(pass) << text;
  }
}

// K/V rows of an odd number of elements are not whole 16-byte vectors: the decode stages them through the workspace
// (CheckSupport says so), and the results must still pass the oracle in every chunking.
TEST(DecodeSupport, OddCacheStridesAreStaged) {
  DecodeCase c;
  c.name = "bf16_d128_b2_h8_2_odd_rows";
  c.headDim = 128;
  c.batch = 2, c.heads = 8, c.kvHeads = 2, c.sq = 2, c.cap = 700;
  c.lens = {700, 333};
  c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  c.kvRowPad = 3;
  c.chunks = {0, 1, 3, 17};
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  DecodeFixture f(c);
  char text[512] = {};
  ASSERT_EQ(flashAttnCheckSupport(f.handle(), FLASHATTN_OP_DECODE_CHUNK, f.attn(), f.seqDesc(), f.q(), f.k(), f.v(),
                                  f.o(), text, sizeof text, nullptr),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  EXPECT_NE(std::string(text).find("staged through the workspace: K (row stride 131)"), std::string::npos) << text;
  for (int32_t chunks : c.chunks) {
    SCOPED_TRACE("chunks " + std::to_string(chunks));
    f.poisonOutputs();
    ASSERT_EQ(f.run(chunks), FLASHATTN_STATUS_SUCCESS) << lastError();
    bool pass = false;
    const std::string result = f.check(&pass);
    EXPECT_TRUE(pass) << result;
  }
}

// Past 16 query tokens DecodeChunk is flashAttnForward on the same descriptors: no workspace, the plan names the
// forward, every chunk count gives the forward's bytes, on a dense and on a paged cache.
TEST(DecodeSupport, SeqQ64RunsAsTheForward) {
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "dense");
    DecodeCase c;
    c.sq = 64, c.cap = 800, c.paged = paged, c.pageSize = 16, c.batch = 2, c.lens = {800, 100};
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.seed = paged ? 61 : 62;
    SKIP_IF_NOT_BUILT(notBuiltFor(c));
    DecodeFixture f(c);
    char text[512] = {};
    ASSERT_EQ(flashAttnCheckSupport(f.handle(), FLASHATTN_OP_DECODE_CHUNK, f.attn(), f.seqDesc(), f.q(), f.k(), f.v(),
                                    f.o(), text, sizeof text, nullptr),
              FLASHATTN_STATUS_SUCCESS)
        << lastError();
    EXPECT_EQ(std::string(text).rfind("cuda.decode.forward", 0), 0u) << text;
    std::vector<uint8_t> firstO, firstL;
    for (int32_t chunks : {0, 1, 9}) {
      size_t bytes = 1;
      f.poisonOutputs();
      ASSERT_EQ(f.run(chunks, &bytes), FLASHATTN_STATUS_SUCCESS) << lastError();
      EXPECT_EQ(bytes, 0u) << chunks << " chunks";
      bool pass = false;
      const std::string result = f.check(&pass);
      EXPECT_TRUE(pass) << chunks << " chunks: " << result;
      if (firstO.empty()) {
        firstO = f.rawO(), firstL = f.rawLse();
      } else {
        EXPECT_TRUE(f.rawO() == firstO && f.rawLse() == firstL) << chunks << " chunks differ from automatic";
      }
    }
    f.poisonOutputs();
    ASSERT_EQ(flashAttnForward(f.handle(), f.attn(), f.seqDesc(), f.q(), f.qPtr(), f.k(), f.kPtr(), f.v(), f.vPtr(),
                               f.o(), f.oPtr(), f.lseDescOrNull(), f.lsePtr(), nullptr, 0),
              FLASHATTN_STATUS_SUCCESS)
        << lastError();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(f.rawO() == firstO && f.rawLse() == firstL) << "DecodeChunk differs from flashAttnForward";
  }
}

// Head dims the split-KV kernels do not take (Q/K 192 with V/O 128, a width that is not a multiple of 8) run as the
// forward of the same cache, dense and paged, with its result.
TEST(DecodeSupport, OtherHeadDimsRunAsTheForward) {
  const struct {
    int64_t d, dv;
  } dims[] = {{192, 128}, {59, 59}, {64, 128}};
  int i = 0, checked = 0;
  for (const auto &hd : dims)
    for (const bool paged : {false, true}) {
      DecodeCase c;
      c.headDim = hd.d, c.headDimV = hd.dv, c.sq = 1 + i % 3, c.cap = 700, c.paged = paged, c.batch = 3;
      c.lens = {700, 0, 133}, c.heads = 8, c.kvHeads = i % 2 ? 1 : 8, c.dtype = i % 3 == 2 ? FLASHATTN_DATA_FP16
                                                                                               : FLASHATTN_DATA_BF16;
      c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.seed = 90 + uint64_t(i++);
      SCOPED_TRACE(std::to_string(hd.d) + "/" + std::to_string(hd.dv) + (paged ? " paged" : " dense"));
      if (const std::string missing = notBuiltFor(c); !missing.empty()) {
        leaveOutPart(missing);
        continue;
      }
      ++checked;
      DecodeFixture f(c);
      char text[512] = {};
      const flashAttnStatus_t s = flashAttnCheckSupport(f.handle(), FLASHATTN_OP_DECODE_CHUNK, f.attn(), f.seqDesc(),
                                                        f.q(), f.k(), f.v(), f.o(), text, sizeof text, nullptr);
      ASSERT_EQ(s, FLASHATTN_STATUS_SUCCESS) << lastError();
      EXPECT_EQ(std::string(text).rfind("cuda.decode.forward", 0), 0u) << text;
      f.poisonOutputs();
      size_t bytes = 1;
      ASSERT_EQ(f.run(4, &bytes), FLASHATTN_STATUS_SUCCESS) << lastError();
      EXPECT_EQ(bytes, 0u);
      bool pass = false;
      const std::string result = f.check(&pass);
      EXPECT_TRUE(pass) << result;
    }
  if (checked == 0) GTEST_SKIP() << "none of its head dims has instances in this build";
}

// The size query is exact: 0 for one chunk, partial O and LSE (256-byte aligned each) for more; one byte less is
// refused before anything is written.
TEST(DecodeSupport, WorkspaceIsExact) {
  // A paged cache of 3-key pages: the cp.async loader, whose split KV ranges always go through partial states in the
  // workspace (the tensor-map loader's, on sm90, may be merged in a cluster, without any).
  DecodeCase c;
  c.batch = 2, c.heads = 8, c.kvHeads = 2, c.sq = 3, c.cap = 1000, c.paged = true, c.pageSize = 3;
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  DecodeFixture f(c);
  size_t bytes = 0;
  ASSERT_EQ(f.run(1, &bytes), FLASHATTN_STATUS_SUCCESS) << lastError();
  EXPECT_EQ(bytes, 0u);
  ASSERT_EQ(f.run(4, &bytes), FLASHATTN_STATUS_SUCCESS) << lastError();
  const size_t rows = size_t(4 * c.batch * c.heads * c.sq);
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  // Partial O and (max, sum) of the 4 chunks; then, unless the separate merge kernel is asked for, the fused merge's tagged
  // count per unit (batch x KV heads; the 12 rows of a KV head fit one CTA) and a flag per unit and chunk.
  const char *merge = std::getenv("FLASHATTN_DECODE_MERGE");
  const size_t units = size_t(c.batch * c.kvHeads);
  const size_t fusedWords = merge && std::string(merge) == "kernel" ? 0 : align(units * 8) + align(units * 4 * 4);
  EXPECT_EQ(bytes, align(rows * size_t(c.headDim) * 4) + align(rows * 8) + fusedWords);
  f.poisonOutputs();
  const std::vector<uint8_t> before = f.rawO();
  EXPECT_EQ(f.run(4, nullptr, 1), FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE);
  EXPECT_TRUE(f.rawO() == before);
}

// Whatever the workspace holds when a call starts (zeros, random bytes, what a call of another chunk count left there),
// the result is the same bytes: the fused merge's counts read anything untagged as "not counted" and take the flag path
// for that call, and leave the words at rest for the next. 16 chunks of a dense BF16 cache: the fused merge on any GPU.
TEST(DecodeSupport, WorkspaceContentsDoNotMatter) {
  DecodeCase c;
  c.name = "workspace_contents";
  c.dtype = FLASHATTN_DATA_BF16, c.batch = 2, c.heads = 8, c.kvHeads = 2, c.cap = 2048, c.lens = {2048, 1500};
  c.seed = 41;
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  DecodeFixture f(c);
  const int32_t chunks = 16;
  size_t bytes = 0;
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(f.handle(), f.attn(), f.seqDesc(), f.q(), f.k(), f.v(), f.o(),
                                                 f.lseDescOrNull(), chunks, &bytes),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  size_t otherBytes = 0;
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(f.handle(), f.attn(), f.seqDesc(), f.q(), f.k(), f.v(), f.o(),
                                                 f.lseDescOrNull(), 5, &otherBytes),
            FLASHATTN_STATUS_SUCCESS);
  DeviceBuffer ws(std::max(bytes, otherBytes));
  auto call = [&](int32_t n, size_t size) {
    return flashAttnDecodeChunk(f.handle(), f.attn(), f.seqDesc(), f.q(), f.qPtr(), f.k(), f.kPtr(), f.v(), f.vPtr(),
                                f.o(), f.oPtr(), f.lseDescOrNull(), f.lsePtr(), n, ws.ptr, size);
  };
  std::mt19937_64 rng(7);
  std::vector<uint8_t> noise(ws.bytes);
  for (uint8_t &b : noise) b = uint8_t(rng());
  std::vector<uint8_t> firstO, firstL;
  const char *fills[] = {"zeros", "random bytes", "the previous call's words", "another chunk count's leftovers"};
  for (int fill = 0; fill < 4; ++fill) {
    SCOPED_TRACE(fills[fill]);
    if (fill == 0) FA_CUDA_CHECK(cudaMemset(ws.ptr, 0, ws.bytes));
    if (fill == 1) FA_CUDA_CHECK(cudaMemcpy(ws.ptr, noise.data(), ws.bytes, cudaMemcpyHostToDevice));
    if (fill == 3) {
      ASSERT_EQ(call(5, otherBytes), FLASHATTN_STATUS_SUCCESS) << lastError();
      FA_CUDA_CHECK(cudaDeviceSynchronize());
    }
    f.poisonOutputs();
    ASSERT_EQ(call(chunks, bytes), FLASHATTN_STATUS_SUCCESS) << lastError();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    if (fill == 0) {
      bool pass = false;
      const std::string text = f.check(&pass);
      EXPECT_TRUE(pass) << text;
      firstO = f.rawO(), firstL = f.rawLse();
      continue;
    }
    EXPECT_TRUE(f.rawO() == firstO) << "O differs from the call on a zeroed workspace";
    EXPECT_TRUE(f.rawLse() == firstL) << "LSE differs from the call on a zeroed workspace";
  }
}

// A workspace that served another decode shape: that plan's idle count words (a tag in their high halves) may lie
// where this plan keeps its per-chunk flags, while this plan's own count words lie on that plan's partial states, so
// its first call counts by flags. With these shapes (MHA, 4 heads, d64, merged in the kernel: batch 6 in 11 chunks,
// then batch 5 in 13) 24 of the first plan's count words sit inside the second plan's flags. Whether a flag misread as
// raised changes the bytes depends on which CTA finishes first, so a last step makes it certain: a workspace whose
// every 32-bit word is the tag the decode leaves in its count words (found in the leftovers: their one NaN pattern)
// turns every count word into a flag fallback and every flag into a tag, and a grid of many waves (batch 64) has units
// whose chunks start a wave apart. A CTA that took a tag for a raised flag would merge as soon as it finished, over
// chunks that have not run yet.
TEST(DecodeSupport, WorkspaceLeftByAnotherShape) {
  const char *merge = std::getenv("FLASHATTN_DECODE_MERGE");
  if (merge != nullptr && std::string(merge) != "fused") GTEST_SKIP() << "the counts and flags are the fused merge's";
  DecodeCase a;
  a.name = "workspace_first_shape";
  a.dtype = FLASHATTN_DATA_BF16, a.headDim = 64, a.batch = 6, a.heads = 4, a.kvHeads = 4, a.cap = 1024;
  a.seed = 51;
  DecodeCase b = a;
  b.name = "workspace_second_shape", b.batch = 5, b.seed = 52;
  DecodeCase many = a;
  many.name = "workspace_many_waves", many.batch = 64, many.cap = 2048, many.seed = 53;
  SKIP_IF_NOT_BUILT(notBuiltFor(a));
  DecodeFixture fa(a), fb(b), fm(many);
  const int32_t chunksA = 11, chunksB = 13;
  auto workspaceSize = [](DecodeFixture &f, int32_t chunks) {
    size_t bytes = 0;
    EXPECT_EQ(flashAttnDecodeChunkGetWorkspaceSize(f.handle(), f.attn(), f.seqDesc(), f.q(), f.k(), f.v(), f.o(),
                                                   f.lseDescOrNull(), chunks, &bytes),
              FLASHATTN_STATUS_SUCCESS)
        << lastError();
    return bytes;
  };
  auto call = [](DecodeFixture &f, int32_t chunks, DeviceBuffer &ws) {
    f.poisonOutputs();
    ASSERT_EQ(flashAttnDecodeChunk(f.handle(), f.attn(), f.seqDesc(), f.q(), f.qPtr(), f.k(), f.kPtr(), f.v(),
                                   f.vPtr(), f.o(), f.oPtr(), f.lseDescOrNull(), f.lsePtr(), chunks, ws.ptr, ws.bytes),
              FLASHATTN_STATUS_SUCCESS)
        << lastError();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
  };
  // The call on a zeroed workspace passes the float64 gates; later calls on `ws` must give the same bytes.
  struct Reference {
    std::vector<uint8_t> o, lse;
  };
  auto reference = [&](DecodeFixture &f, int32_t chunks, DeviceBuffer &ws) {
    FA_CUDA_CHECK(cudaMemset(ws.ptr, 0, ws.bytes));
    call(f, chunks, ws);
    bool pass = false;
    const std::string text = f.check(&pass);
    EXPECT_TRUE(pass) << text;
    return Reference{f.rawO(), f.rawLse()};
  };
  auto expectSame = [](DecodeFixture &f, const Reference &r, const char *what) {
    SCOPED_TRACE(what);
    bool pass = false;
    const std::string text = f.check(&pass);
    EXPECT_TRUE(pass) << text;
    EXPECT_TRUE(f.rawO() == r.o) << "O differs from the call on a zeroed workspace";
    EXPECT_TRUE(f.rawLse() == r.lse) << "LSE differs from the call on a zeroed workspace";
  };

  DeviceBuffer ws(std::max(workspaceSize(fa, chunksA), workspaceSize(fb, chunksB)));
  const Reference refB = reference(fb, chunksB, ws);
  for (int round = 0; round < 2; ++round) {
    call(fa, chunksA, ws);  // a first call on words of the other plan: flags, then tagged counts
    call(fa, chunksA, ws);  // counts; the words are left idle
    bool pass = false;
    const std::string text = fa.check(&pass);
    EXPECT_TRUE(pass) << text;
    call(fb, chunksB, ws);
    expectSame(fb, refB, "after the other shape");
  }

  std::vector<uint32_t> words(ws.bytes / 4);
  FA_CUDA_CHECK(cudaMemcpy(words.data(), ws.ptr, words.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<uint32_t> tags;
  for (uint32_t w : words)
    if ((w & 0x7f800000u) == 0x7f800000u && (w & 0x007fffffu) != 0 &&
        std::find(tags.begin(), tags.end(), w) == tags.end())
      tags.push_back(w);
  ASSERT_EQ(tags.size(), 1u) << "the decode's leftovers should hold one NaN pattern, its count tag";
  DeviceBuffer wsMany(workspaceSize(fm, chunksB));
  const Reference refMany = reference(fm, chunksB, wsMany);
  const std::vector<uint32_t> tagWords(wsMany.bytes / 4, tags[0]);
  FA_CUDA_CHECK(cudaMemcpy(wsMany.ptr, tagWords.data(), tagWords.size() * 4, cudaMemcpyHostToDevice));
  call(fm, chunksB, wsMany);
  expectSame(fm, refMany, "on a workspace of count tags");
}

// The backend reuses the plan of a problem equal in every field to one planned before on the thread (a decode loop
// asks for the same plan each step). Two problems of the same shapes that differ in their attention attributes, and
// chunk counts that change call to call, must each get their own plan and result; a descriptor changed into an
// invalid one after a successful call is refused, and the restored one runs again.
TEST(DecodeSupport, ReusedPlansFollowEveryChange) {
  DecodeCase a;
  a.batch = 3, a.heads = 8, a.kvHeads = 2, a.cap = 700, a.lens = oddLengths(3, 700, 5), a.seed = 5;
  DecodeCase b = a;
  b.windowLeft = 90, b.softcap = 20.f, b.seed = 6;
  SKIP_IF_NOT_BUILT(notBuiltFor(a));
  DecodeFixture fa(a), fb(b);
  const struct {
    DecodeFixture *f;
    int32_t chunks;
    const char *what;
  } steps[] = {{&fa, 0, "a auto"}, {&fb, 0, "b auto"}, {&fa, 3, "a 3 chunks"}, {&fa, 0, "a auto again"},
               {&fb, 5, "b 5 chunks"}, {&fa, 1, "a 1 chunk"}, {&fb, 0, "b auto again"}};
  for (const auto &st : steps) {
    SCOPED_TRACE(st.what);
    st.f->poisonOutputs();
    ASSERT_EQ(st.f->run(st.chunks), FLASHATTN_STATUS_SUCCESS) << lastError();
    bool pass = false;
    const std::string text = st.f->check(&pass);
    EXPECT_TRUE(pass) << text;
  }

  // O re-set to 4 heads (Q has 8) after a successful call on the same descriptors: refused, outputs untouched.
  size_t bytes = 0;
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(fa.handle(), fa.attn(), fa.seqDesc(), fa.q(), fa.k(), fa.v(), fa.o(),
                                                 fa.lseDescOrNull(), 0, &bytes),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  DeviceBuffer ws(bytes);
  ws.poison();
  auto call = [&] {
    return flashAttnDecodeChunk(fa.handle(), fa.attn(), fa.seqDesc(), fa.q(), fa.qPtr(), fa.k(), fa.kPtr(), fa.v(),
                                fa.vPtr(), fa.o(), fa.oPtr(), fa.lseDescOrNull(), fa.lsePtr(), 0, ws.ptr, bytes);
  };
  const int64_t d = a.headDim;
  const int64_t narrowDims[4] = {a.batch, 4, 1, d}, narrowStrides[4] = {4 * d, d, d, 1};
  const int64_t dims[4] = {a.batch, a.heads, 1, d}, strides[4] = {a.heads * d, d, d, 1};
  ASSERT_EQ(flashAttnSetTensorDescriptor(fa.o(), a.dtype, 4, narrowDims, narrowStrides), FLASHATTN_STATUS_SUCCESS);
  fa.poisonOutputs();
  const std::vector<uint8_t> before = fa.rawO();
  EXPECT_EQ(call(), FLASHATTN_STATUS_BAD_PARAM);
  EXPECT_NE(lastError().find("heads"), std::string::npos) << lastError();
  EXPECT_TRUE(fa.rawO() == before);
  ASSERT_EQ(flashAttnSetTensorDescriptor(fa.o(), a.dtype, 4, dims, strides), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(call(), FLASHATTN_STATUS_SUCCESS) << lastError();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  bool pass = false;
  const std::string text = fa.check(&pass);
  EXPECT_TRUE(pass) << "restored O: " << text;
}

TEST(DecodeSupport, CheckSupportNamesTheKernel) {
  DecodeCase c;
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  DecodeFixture f(c);
  char text[512] = {};
  int32_t deterministic = 0;
  ASSERT_EQ(flashAttnCheckSupport(f.handle(), FLASHATTN_OP_DECODE_CHUNK, f.attn(), nullptr, f.q(), f.k(), f.v(), f.o(),
                                  text, sizeof text, &deterministic),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  EXPECT_NE(std::string(text).find("cuda.decode"), std::string::npos) << text;
  EXPECT_EQ(deterministic, 1);
}

// Forward and DecodeChunk at scale 1e6: two keys that matter at the two ends of a 256-key cache (the others have dot
// products of -1, weight exactly 0), over two chunks, so that each chunk holds one and the decode's merge carries the
// answer. "Close": the two logits are 1e6 and 1e6 + 0.95, where FP32 arithmetic on the logits themselves (ulp 0.0625
// at 1e6, 0.125 in log2 units) would move the weights by percent; "apart": 1e6 and 1e6 - 977, one key takes all.
// Both operations pass the gates against the float64 oracle (so they agree with each other), in every merge mode the
// CTest variants of this binary select. Scale FLT_MAX is refused by both (bad-input catalogue).
TEST(DecodeSupport, AgreesWithForwardAtScale1e6TwoKeysOverTwoChunks) {
  constexpr int64_t kD = 64, kN = 256;
  struct Inputs {
    const char *name;
    double q1, k2;  // q = (1, q1, 0...), k_first = (1, 0...), k_last = (1, k2, 0...)
  } inputs[] = {{"close", 1.0 / 1024, 1.0 / 1024}, {"apart", 1.0, -1.0 / 1024}};
  Handle handle(FLASHATTN_BACKEND_CUDA);
  AttnDesc attn;
  check(flashAttnSetAttentionScale(attn, 1e6f), "scale");
  int checked = 0;
  for (const flashAttnDataType_t dtype : {FLASHATTN_DATA_FP16, FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP32}) {
    if (!partBuiltAtLeast(Family::Forward, dtype, kD) || !partBuiltAtLeast(Family::Decode, dtype, kD)) continue;
    ++checked;
    TensorDesc qd, kvd, ld;
    qd.set(dtype, {1, 1, 1, kD}, {kD, kD, kD, 1});
    kvd.set(dtype, {1, 1, kN, kD}, {kN * kD, kN * kD, kD, 1});
    ld.set(FLASHATTN_DATA_FP32, {1, 1, 1}, {1, 1, 1});
    for (const Inputs &in : inputs) {
      const std::string name = std::string(typeName(dtype)) + " " + in.name;
      HostTensor q(dtype, {1, 1, 1, kD}, {kD, kD, kD, 1}), k(dtype, {1, 1, kN, kD}, {kN * kD, kN * kD, kD, 1}),
          v(dtype, {1, 1, kN, kD}, {kN * kD, kN * kD, kD, 1});
      q.set({0, 0, 0, 0}, 1.0);
      q.set({0, 0, 0, 1}, in.q1);
      for (int64_t j = 0; j < kN; ++j) {
        k.set({0, 0, j, 0}, j == 0 || j == kN - 1 ? 1.0 : -1.0);
        for (int64_t d = 0; d < kD; ++d) v.set({0, 0, j, d}, j == 0 ? 5.0 : j == kN - 1 ? 3.0 : 1.0);
      }
      k.set({0, 0, kN - 1, 1}, in.k2);
      DeviceBuffer dq(q), dk(k), dv(v), oF(size_t(kD) * elementSize(dtype)), oD(oF.bytes), lF(4), lD(4);
      oF.poison(), oD.poison(), lF.poison(), lD.poison();
      check(flashAttnForward(handle, attn, nullptr, qd, dq.get(), kvd, dk.get(), kvd, dv.get(), qd, oF.get(), ld,
                             lF.get<float>(), nullptr, 0),
            "forward");
      size_t bytes = 0;
      check(flashAttnDecodeChunkGetWorkspaceSize(handle, attn, nullptr, qd, kvd, kvd, qd, ld, 2, &bytes), "size");
      DeviceBuffer ws(bytes);
      ws.poison();  // the fused merge's tagged counters take any contents; initcheck wants them written once
      check(flashAttnDecodeChunk(handle, attn, nullptr, qd, dq.get(), kvd, dk.get(), kvd, dv.get(), qd, oD.get(), ld,
                                 lD.get<float>(), 2, ws.get(), bytes),
            "decode");
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      fa_ref::Problem rp;
      rp.headDim = rp.headDimV = kD;
      rp.maxSq = 1;
      rp.maxSk = kN;
      rp.scale = 1e6;
      std::vector<double> qs(kD), ks(kN * kD), vs(kN * kD), refO, refLse;
      for (int64_t d = 0; d < kD; ++d) qs[size_t(d)] = q.at({0, 0, 0, d});
      for (int64_t j = 0; j < kN; ++j)
        for (int64_t d = 0; d < kD; ++d) {
          ks[size_t(j * kD + d)] = k.at({0, 0, j, d});
          vs[size_t(j * kD + d)] = v.at({0, 0, j, d});
        }
      fa_ref::forward(rp, qs, ks, vs, refO, refLse);
      HostTensor outF(dtype, {1, 1, 1, kD}, {kD, kD, kD, 1}), outD = outF;
      oF.download(outF);
      oD.download(outD);
      std::vector<double> of(kD), od(kD);
      for (int64_t d = 0; d < kD; ++d) of[size_t(d)] = outF.at({0, 0, 0, d}), od[size_t(d)] = outD.at({0, 0, 0, d});
      float lseF = 0, lseD = 0;
      FA_CUDA_CHECK(cudaMemcpy(&lseF, lF.get(), 4, cudaMemcpyDeviceToHost));
      FA_CUDA_CHECK(cudaMemcpy(&lseD, lD.get(), 4, cudaMemcpyDeviceToHost));
      const double tol = fa_ref::normTolerance(roundingOf(dtype));
      // The relative gate's storage-rounded variant rounds Q.K itself to the storage type, which at this scale moves a
      // logit by hundreds; the normwise gate bounds the error outright and is the one that can fail.
      const fa_ref::Gate gateF = fa_ref::checkGates(of, refO, refO, 2.0, tol);
      const fa_ref::Gate gateD = fa_ref::checkGates(od, refO, refO, 2.0, tol);
      EXPECT_TRUE(gateF.finite && gateF.normwise <= tol) << name << ": forward O[0] " << of[0] << ", oracle " << refO[0]
                                                          << ": " << gateF.describe();
      EXPECT_TRUE(gateD.finite && gateD.normwise <= tol) << name << ": decode O[0] " << od[0] << ", oracle " << refO[0]
                                                          << ": " << gateD.describe();
      // LSE ~ 1e6 in FP32: its own rounding (half an ulp, 0.03) is above the 1e-4 gate.
      const double lseTol = std::max(lseTolerance(dtype, refLse), std::fabs(refLse[0]) * 0x1p-24);
      EXPECT_LE(std::fabs(double(lseF) - refLse[0]), lseTol) << name << ": forward LSE " << lseF << ", oracle "
                                                             << refLse[0];
      EXPECT_LE(std::fabs(double(lseD) - refLse[0]), lseTol) << name << ": decode LSE " << lseD << ", oracle "
                                                             << refLse[0];
    }
  }
  if (checked == 0) GTEST_SKIP() << "no storage type with forward and decode instances of head dim 64: "
                                 << kNotInThisBuild;
}

// Captured once, replayed with other lengths and block tables written into device memory between replays: each
// replay equals an eager run on the same index data.
void graphReplay(bool paged) {
  DecodeCase c;
  c.name = paged ? "graph_paged" : "graph_dense";
  c.batch = 3, c.heads = 8, c.kvHeads = 2, c.sq = 2, c.cap = 600, c.paged = paged;
  c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.lens = {600, 17, 333}, c.seed = paged ? 7 : 8;
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  DecodeFixture f(c);
  const std::vector<int32_t> lensA = f.lens(), tableA = f.table();
  const std::vector<int32_t> lensB = {333, 0, 599};
  std::vector<int32_t> tableB = tableA;
  for (int64_t pg = 0; paged && pg < f.pagesPerSeq(); ++pg)
    std::swap(tableB[size_t(pg)], tableB[size_t(2 * f.pagesPerSeq() + pg)]);

  const int32_t chunks = 5;
  size_t bytes = 0;
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(f.handle(), f.attn(), f.seqDesc(), f.q(), f.k(), f.v(), f.o(),
                                                 f.lseDescOrNull(), chunks, &bytes),
            FLASHATTN_STATUS_SUCCESS);
  DeviceBuffer ws(bytes);
  ws.poison();
  auto enqueue = [&] {
    return flashAttnDecodeChunk(f.handle(), f.attn(), f.seqDesc(), f.q(), f.qPtr(), f.k(), f.kPtr(), f.v(), f.vPtr(),
                                f.o(), f.oPtr(), f.lseDescOrNull(), f.lsePtr(), chunks, ws.ptr, bytes);
  };
  cudaStream_t stream;
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_EQ(flashAttnSetStream(f.handle(), stream), FLASHATTN_STATUS_SUCCESS);

  std::vector<uint8_t> eagerO[2], eagerL[2];
  for (int which = 0; which < 2; ++which) {
    f.setIndexData(which ? lensB : lensA, which ? tableB : tableA);
    f.poisonOutputs();
    ASSERT_EQ(enqueue(), FLASHATTN_STATUS_SUCCESS) << lastError();
    FA_CUDA_CHECK(cudaStreamSynchronize(stream));
    eagerO[which] = f.rawO();
    eagerL[which] = f.rawLse();
  }
  f.setIndexData(lensA, tableA);
  bool pass = false;
  f.poisonOutputs();
  ASSERT_EQ(enqueue(), FLASHATTN_STATUS_SUCCESS);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::string text = f.check(&pass);
  EXPECT_TRUE(pass) << text;

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const flashAttnStatus_t captured = enqueue();
  FA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ASSERT_EQ(captured, FLASHATTN_STATUS_SUCCESS) << lastError();
  FA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int which : {1, 0, 1}) {
    f.setIndexData(which ? lensB : lensA, which ? tableB : tableA);
    f.poisonOutputs();
    FA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FA_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(f.rawO() == eagerO[which]) << "replay with index data " << which << " differs from eager O";
    EXPECT_TRUE(f.rawLse() == eagerL[which]) << "replay with index data " << which << " differs from eager LSE";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  flashAttnSetStream(f.handle(), nullptr);
  cudaStreamDestroy(stream);
}

TEST(DecodeGraph, DenseReplayWithChangedLengthsEqualsEager) { graphReplay(false); }
TEST(DecodeGraph, PagedReplayWithChangedBlockTablesEqualsEager) { graphReplay(true); }

}  // namespace
