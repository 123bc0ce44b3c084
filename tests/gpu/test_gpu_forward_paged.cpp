// SPDX-License-Identifier: BSD-3-Clause
// flashAttnForward over paged K/V caches on the CUDA backend, through the public API: chunked prefill (a ragged Q of
// new tokens, no cuSeqlensK) and a dense Q, against the float64 oracle of tests/common/reference.hpp with the gates
// of docs/testing.md. Page sizes 1, 3, 16, 64 and 256; block tables from a random permutation of the pool with spare
// pages; NaN in every slot and page no sequence uses and garbage in the table entries past each sequence's last page
// (none may be read); per-sequence lengths 0, 1 and on page boundaries; 1, 17 and 512 new tokens over prefixes up to
// 3000, and 1 and 17 over 64k; GQA 1, 4, 8 and 16; FP16, BF16 and FP32; masks, window, softcap, ALiBi and sinks on
// some cases. Each case also runs on a dense cache holding the same keys, which the same kernel family must answer
// bitwise alike, and twice (bitwise repeatable). A captured graph replays with other lengths, block tables and query
// offsets written between replays.
// The CTest variant test_gpu_forward_paged_portable runs it all on the portable families.
//
// Wide heads on pages of 16, 64 and 256 (the Hopper kernel's tensor-map copies of page runs): Q/K 192 with V/O 128
// (MLA prefill, V and O descriptors of their own width) and 256, chunked prefill and dense Q; row-by-row copies (pages
// of 1 and 3) at head dims 96, 192 with 128, and 256.
//
// FLASHATTN_TEST_SLICE=edge runs the small cases only (for compute-sanitizer), a 192/128 one on pages of 16 and a
// head dim of 96 on pages of 1 among them. A case whose storage type has no forward instance as wide as its head dims
// in this build (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS) skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

using namespace fa_test;

namespace {

// Ragged Q: the sequence's new tokens and the cached keys before them (its keys are prefix + newTokens). Dense Q:
// newTokens is unused (every sequence has denseSeqQ rows) and prefix is the sequence's whole KV length.
struct Sequence {
  int64_t newTokens;
  int64_t prefix;
};

struct PagedCase {
  std::string name;
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t headDim = 128;
  int64_t headDimV = 0;  // of V and O; 0: the same as headDim
  int64_t heads = 8, kvHeads = 2;
  std::vector<Sequence> seqs;
  bool raggedQ = true;  // false: a dense Q of denseSeqQ rows per sequence
  int64_t denseSeqQ = 0;
  int64_t pageSize = 16;
  int64_t sparePagesPerSeq = 1;  // table entries past each sequence's last page (garbage values)
  int64_t vPagePad = 0;          // elements between V's pages past its rows (V's offsets then differ from K's)
  flashAttnMaskMode_t mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  int64_t windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  bool alibi = false;
  bool sinks = false;
  bool withLse = true;
  uint64_t seed = 1;

  int64_t dv() const { return headDimV > 0 ? headDimV : headDim; }
  int64_t vPageStride() const { return pageSize * kvHeads * dv() + vPagePad; }
  int64_t batch() const { return int64_t(seqs.size()); }
  int64_t queryRows(size_t b) const { return raggedQ ? seqs[b].newTokens : denseSeqQ; }
  int64_t keys(size_t b) const { return seqs[b].prefix + (raggedQ ? seqs[b].newTokens : 0); }
};


// One case's inputs on the device: Q (ragged [tokens, heads, d] or dense BSHD), the paged cache and a dense cache of
// the same keys (ragged [tokens, kvHeads, d] with cuSeqlensK for a ragged Q, padded [b, kvHeads, cap, d] with
// seqlensK for a dense one), O and LSE, the index arrays and their descriptors. V and O have dv columns (K's d where
// the case sets no headDimV), so V has descriptors of its own.
class PagedFixture {
 public:
  explicit PagedFixture(const PagedCase &c) : c_(c) { build(); }

  // Forward on the paged cache (or on the dense one), into O and LSE poisoned first.
  flashAttnStatus_t run(bool pagedCache) {
    poisonOutputs();
    const flashAttnStatus_t s = enqueue(pagedCache);
    if (s == FLASHATTN_STATUS_SUCCESS) FA_CUDA_CHECK(cudaDeviceSynchronize());
    return s;
  }

  flashAttnStatus_t enqueue(bool pagedCache) {
    return flashAttnForward(handle_, attn_, pagedCache ? pagedSeq_ : denseSeq_, qDesc_, q_.ptr,
                            pagedCache ? pagesDesc_ : denseDesc_, pagedCache ? kPages_.ptr : kDense_.ptr,
                            pagedCache ? vPagesDesc_ : vDenseDesc_, pagedCache ? vPages_.ptr : vDense_.ptr, oDesc_,
                            o_.ptr, c_.withLse ? flashAttnTensorDescriptor_t(lseDesc_) : nullptr,
                            c_.withLse ? lse_.get<float>() : nullptr, nullptr, 0);
  }

  size_t workspaceBytes(bool pagedCache) {
    size_t bytes = 1;
    check(flashAttnForwardGetWorkspaceSize(handle_, attn_, pagedCache ? pagedSeq_ : denseSeq_, qDesc_,
                                           pagedCache ? pagesDesc_ : denseDesc_,
                                           pagedCache ? vPagesDesc_ : vDenseDesc_, oDesc_,
                                           c_.withLse ? flashAttnTensorDescriptor_t(lseDesc_) : nullptr, &bytes),
          "workspace size");
    return bytes;
  }

  // The kernel family CheckSupport names (its first word).
  std::string family(bool pagedCache) {
    char text[512] = {};
    check(flashAttnCheckSupport(handle_, FLASHATTN_OP_FORWARD, attn_, pagedCache ? pagedSeq_ : denseSeq_, qDesc_,
                                pagedCache ? pagesDesc_ : denseDesc_, pagedCache ? vPagesDesc_ : vDenseDesc_, oDesc_,
                                text, sizeof text, nullptr),
          "CheckSupport");
    const std::string s = text;
    return s.substr(0, s.find(' '));
  }

  // NaN in every byte of O and LSE, finished before anything is enqueued on the handle's (maybe non-blocking) stream.
  void poisonOutputs() {
    o_.poison();
    lse_.poison();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::vector<uint8_t> rawO() const { return o_.raw(); }

  // Where the current O differs from `other` (raw bytes of an earlier run): how many (sequence, head, row) rows, the
  // first few with their largest difference, so that a mismatch says which tiles and heads to look at.
  std::string describeDifference(const std::vector<uint8_t> &other) const {
    const std::vector<uint8_t> mine = o_.raw();
    std::ostringstream s;
    int64_t rows = 0;
    for (int64_t b = 0; b < c_.batch(); ++b)
      for (int64_t h = 0; h < c_.heads; ++h)
        for (int64_t i = 0; i < rp_.seqQ(b); ++i) {
          double largest = 0;
          int64_t column = -1;
          for (int64_t x = 0; x < c_.dv(); ++x) {
            const double a = loadElement(mine.data(), c_.dtype, oOffset(b, h, i) + x);
            const double e = loadElement(other.data(), c_.dtype, oOffset(b, h, i) + x);
            if (!(a == e) && !(std::isnan(a) && std::isnan(e)) && (column < 0 || std::fabs(a - e) > largest))
              largest = std::fabs(a - e), column = x;
          }
          if (column < 0) continue;
          if (rows++ < 6)
            s << " (seq " << b << " head " << h << " row " << i << ": col " << column << " by " << largest << ")";
        }
    return std::to_string(rows) + " rows differ:" + s.str();
  }
  std::vector<uint8_t> rawLse() const { return lse_.raw(); }

  // Both gates on O, the LSE gate (finiteness included), against the oracle of the current index data.
  std::string verify(bool *pass) {
    std::vector<double> ref, refLse, lp, lpLse;
    referenceForwardByKvGroup(rp_, q_canon_, k_canon_, v_canon_, ref, refLse, fa_ref::Rounding::None);
    referenceForwardByKvGroup(rp_, q_canon_, k_canon_, v_canon_, lp, lpLse, roundingOf(c_.dtype));
    HostTensor o = oHost_;
    o_.download(o);
    std::vector<float> lse(static_cast<size_t>(lseElements_));
    FA_CUDA_CHECK(cudaMemcpy(lse.data(), lse_.ptr, lse.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> out(rp_.oSize(), 0.0), outLse(rp_.lseSize(), -INFINITY);
    for (int64_t b = 0; b < c_.batch(); ++b)
      for (int64_t h = 0; h < c_.heads; ++h)
        for (int64_t i = 0; i < rp_.seqQ(b); ++i) {
          const size_t row = size_t((b * c_.heads + h) * rp_.maxSq + i);
          for (int64_t x = 0; x < c_.dv(); ++x)
            out[row * size_t(c_.dv()) + size_t(x)] = loadElement(o.bytes.data(), c_.dtype, oOffset(b, h, i) + x);
          outLse[row] = lse[size_t(lseOffset(b, h, i))];
        }
    const fa_ref::Gate g = fa_ref::checkGates(out, ref, lp, 2.0, fa_ref::normTolerance(roundingOf(c_.dtype)));
    *pass = g.pass;
    std::string text = "O " + g.describe();
    if (c_.withLse) {
      const fa_ref::Gate gl = fa_ref::checkLse(outLse, refLse, lseTolerance(c_.dtype, refLse));
      *pass = *pass && gl.pass;
      text += "; LSE " + gl.describe();
      size_t worst = refLse.size();
      double worstErr = -1;
      for (size_t r = 0; r < refLse.size(); ++r)
        if (std::isfinite(refLse[r]) && std::fabs(outLse[r] - refLse[r]) > worstErr)
          worst = r, worstErr = std::fabs(outLse[r] - refLse[r]);
      if (worst < refLse.size()) {
        const int64_t rowsPerHead = rp_.maxSq;
        std::ostringstream w;
        w << " worst at seq " << int64_t(worst) / rowsPerHead / c_.heads << " head "
          << int64_t(worst) / rowsPerHead % c_.heads << " row " << int64_t(worst) % rowsPerHead << " ("
          << outLse[worst] << " against " << refLse[worst] << ")";
        if (std::getenv("FLASHATTN_TEST_LSE_ROWS") != nullptr) {
          // Every row of the worst (sequence, head): whether the error follows the row's keys or is the same.
          w << "; that head's rows:";
          const size_t first = worst - worst % size_t(rowsPerHead);
          for (size_t r = first; r < first + size_t(rowsPerHead); ++r)
            if (std::isfinite(refLse[r])) w << " " << outLse[r] - refLse[r];
        }
        text += w.str();
      }
    }
    return text;
  }

  // Graph test: new lengths (new tokens and keys per sequence, within the tensors' bounds) and a new table, written
  // into the same device arrays; the oracle follows.
  void setIndexData(const std::vector<Sequence> &seqs, const std::vector<int32_t> &table) {
    std::vector<int32_t> cuQ{0}, lens;
    for (size_t b = 0; b < seqs.size(); ++b) {
      cuQ.push_back(cuQ.back() + int32_t(c_.raggedQ ? seqs[b].newTokens : c_.denseSeqQ));
      lens.push_back(int32_t(seqs[b].prefix + (c_.raggedQ ? seqs[b].newTokens : 0)));
    }
    FA_CUDA_CHECK(cudaMemcpy(lens_.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    FA_CUDA_CHECK(cudaMemcpy(table_.ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    if (c_.raggedQ) FA_CUDA_CHECK(cudaMemcpy(cuQ_.ptr, cuQ.data(), cuQ.size() * 4, cudaMemcpyHostToDevice));
    cuQHost_ = {cuQ.begin(), cuQ.end()};
    rp_.sq.clear();
    rp_.sk.clear();
    for (size_t b = 0; b < seqs.size(); ++b) {
      rp_.sq.push_back(c_.raggedQ ? seqs[b].newTokens : c_.denseSeqQ);
      rp_.sk.push_back(lens[b]);
    }
    // The pages now named hold the keys of the new table, and the query rows sit at the new offsets.
    tableHost_ = table;
    writePages();
    writeQ();
  }

  const std::vector<int32_t> &table() const { return tableHost_; }
  int64_t pagesPerSeq() const { return pagesPerSeq_; }
  int64_t numPages() const { return numPages_; }
  flashAttnHandle_t handle() const { return handle_; }

 private:
  // Element offsets of row (b, h, i) in Q (d columns) and O (dv columns): the same layouts of other widths.
  int64_t rowOffset(int64_t b, int64_t h, int64_t i, int64_t width) const {
    return c_.raggedQ ? (cuQHost_[size_t(b)] + i) * c_.heads * width + h * width
                      : ((b * c_.denseSeqQ + i) * c_.heads + h) * width;
  }
  int64_t qOffset(int64_t b, int64_t h, int64_t i) const { return rowOffset(b, h, i, c_.headDim); }
  int64_t oOffset(int64_t b, int64_t h, int64_t i) const { return rowOffset(b, h, i, c_.dv()); }
  int64_t lseOffset(int64_t b, int64_t h, int64_t i) const {
    return c_.raggedQ ? (cuQHost_[size_t(b)] + i) * c_.heads + h : (b * c_.heads + h) * c_.denseSeqQ + i;
  }

  // The pool: NaN everywhere, then each sequence's keys [0, seqK(b)) in the pages its table row names.
  void writePages() {
    const int64_t d = c_.headDim, dv = c_.dv();
    HostTensor kh(c_.dtype, {numPages_, c_.pageSize, c_.kvHeads, d},
                  {c_.pageSize * c_.kvHeads * d, c_.kvHeads * d, d, 1});
    HostTensor vh(c_.dtype, {numPages_, c_.pageSize, c_.kvHeads, dv}, {c_.vPageStride(), c_.kvHeads * dv, dv, 1});
    kh.fillNaN();
    vh.fillNaN();
    for (int64_t b = 0; b < c_.batch(); ++b)
      for (int64_t j = 0; j < rp_.seqK(b); ++j) {
        const int32_t page = tableHost_[size_t(b * pagesPerSeq_ + j / c_.pageSize)];
        for (int64_t h = 0; h < c_.kvHeads; ++h) {
          for (int64_t x = 0; x < d; ++x)
            kh.set({page, j % c_.pageSize, h, x}, k_canon_[size_t(((b * c_.kvHeads + h) * capacity_ + j) * d + x)]);
          for (int64_t x = 0; x < dv; ++x)
            vh.set({page, j % c_.pageSize, h, x}, v_canon_[size_t(((b * c_.kvHeads + h) * capacity_ + j) * dv + x)]);
        }
      }
    FA_CUDA_CHECK(cudaMemcpy(kPages_.ptr, kh.bytes.data(), kh.bytes.size(), cudaMemcpyHostToDevice));
    FA_CUDA_CHECK(cudaMemcpy(vPages_.ptr, vh.bytes.data(), vh.bytes.size(), cudaMemcpyHostToDevice));
  }

  // Q from the canonical values at the current offsets; the tokens past the last sequence keep zeros.
  void writeQ() {
    HostTensor qh(c_.dtype, qDims_, qStrides_);
    for (int64_t b = 0; b < c_.batch(); ++b)
      for (int64_t h = 0; h < c_.heads; ++h)
        for (int64_t i = 0; i < rp_.seqQ(b); ++i)
          for (int64_t x = 0; x < c_.headDim; ++x)
            storeElement(qh.bytes.data(), c_.dtype, qOffset(b, h, i) + x,
                         q_canon_[size_t(((b * c_.heads + h) * rp_.maxSq + i) * c_.headDim + x)]);
    if (q_.bytes != qh.bytes.size()) q_ = DeviceBuffer(qh.bytes.size());
    FA_CUDA_CHECK(cudaMemcpy(q_.ptr, qh.bytes.data(), qh.bytes.size(), cudaMemcpyHostToDevice));
  }

  void build() {
    const PagedCase &c = c_;
    std::mt19937_64 rng(c.seed);
    const int64_t B = c.batch();
    int64_t maxQ = 1, maxK = 1, totalQ = 0;
    for (size_t b = 0; b < c.seqs.size(); ++b) {
      maxQ = std::max(maxQ, c.queryRows(b));
      maxK = std::max(maxK, c.keys(b));
      totalQ += c.queryRows(b);
    }
    pagesPerSeq_ = (maxK + c.pageSize - 1) / c.pageSize + c.sparePagesPerSeq;
    capacity_ = pagesPerSeq_ * c.pageSize;
    numPages_ = B * pagesPerSeq_ + 3;  // 3 pages no table row names

    const int64_t d = c.headDim, dv = c.dv();
    rp_.batch = B, rp_.heads = c.heads, rp_.kvHeads = c.kvHeads, rp_.headDim = d, rp_.headDimV = dv;
    rp_.maxSq = maxQ, rp_.maxSk = capacity_;
    for (size_t b = 0; b < c.seqs.size(); ++b) {
      rp_.sq.push_back(c.queryRows(b));
      rp_.sk.push_back(c.keys(b));
    }
    const float scale = float(1.0 / std::sqrt(double(d)));
    rp_.scale = scale;
    rp_.softcap = c.softcap;
    rp_.mask = fa_ref::Mask(int(c.mask));
    rp_.windowLeft = c.windowLeft, rp_.windowRight = c.windowRight;
    std::vector<float> slopes, sinks;
    if (c.alibi) {
      std::uniform_real_distribution<double> u(0.01, 0.3);
      for (int64_t h = 0; h < c.heads; ++h) slopes.push_back(float(u(rng)));
      rp_.alibi.assign(slopes.begin(), slopes.end());
    }
    if (c.sinks) {
      std::uniform_real_distribution<double> u(-2.0, 2.0);
      for (int64_t h = 0; h < c.heads; ++h) sinks.push_back(float(h % 3 == 2 ? 30.0 : u(rng)));
      rp_.sinks.assign(sinks.begin(), sinks.end());
    }
    q_canon_ = randomValues(rng, rp_.qSize(), c.dtype);
    k_canon_ = randomValues(rng, rp_.kSize(), c.dtype);
    v_canon_ = randomValues(rng, rp_.vSize(), c.dtype);

    // Q and O: ragged [totalQ, heads, d | dv] or dense BSHD [b, sq, heads, d | dv] (rows of heads * d or heads * dv
    // elements).
    std::vector<int64_t> qDims, qStrides, oDims, oStrides, lDims, lStrides;
    cuQHost_.assign(1, 0);
    for (size_t b = 0; b < c.seqs.size(); ++b) cuQHost_.push_back(cuQHost_.back() + c.queryRows(b));
    if (c.raggedQ) {
      qDims = {std::max<int64_t>(totalQ, 1), c.heads, d};
      qStrides = {c.heads * d, d, 1};
      oDims = {std::max<int64_t>(totalQ, 1), c.heads, dv};
      oStrides = {c.heads * dv, dv, 1};
      lDims = {std::max<int64_t>(totalQ, 1), c.heads};
      lStrides = {c.heads, 1};
      lseElements_ = std::max<int64_t>(totalQ, 1) * c.heads;
    } else {
      qDims = {B, c.heads, c.denseSeqQ, d};
      qStrides = {c.denseSeqQ * c.heads * d, d, c.heads * d, 1};
      oDims = {B, c.heads, c.denseSeqQ, dv};
      oStrides = {c.denseSeqQ * c.heads * dv, dv, c.heads * dv, 1};
      lDims = {B, c.heads, c.denseSeqQ};
      lStrides = {c.heads * c.denseSeqQ, c.denseSeqQ, 1};
      lseElements_ = B * c.heads * c.denseSeqQ;
    }
    qDims_ = qDims;
    qStrides_ = qStrides;
    writeQ();
    oHost_ = HostTensor(c.dtype, oDims, oStrides);
    o_ = DeviceBuffer(oHost_.bytes.size());
    lse_ = DeviceBuffer(size_t(lseElements_) * 4);
    expect(qDesc_.set(c.dtype, qDims, qStrides));
    expect(oDesc_.set(c.dtype, oDims, oStrides));
    expect(lseDesc_.set(FLASHATTN_DATA_FP32, lDims, lStrides));

    // Block table: used pages from a random permutation of the pool, garbage past each sequence's last page.
    std::vector<int32_t> perm(static_cast<size_t>(numPages_));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tableHost_.assign(size_t(B * pagesPerSeq_), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t pg = 0; pg < pagesPerSeq_; ++pg) {
        const bool used = pg * c.pageSize < rp_.seqK(b);
        tableHost_[size_t(b * pagesPerSeq_ + pg)] =
            used ? perm[size_t(b * pagesPerSeq_ + pg)] : int32_t(pg % 2 ? -7 : numPages_ + 5);
      }
    kPages_ = DeviceBuffer(size_t(numPages_ * c.pageSize * c.kvHeads * d) * elementSize(c.dtype));
    vPages_ = DeviceBuffer(size_t((numPages_ - 1) * c.vPageStride() + c.pageSize * c.kvHeads * dv) *
                           elementSize(c.dtype));
    writePages();
    expect(pagesDesc_.set(c.dtype, {numPages_, c.pageSize, c.kvHeads, d},
                          {c.pageSize * c.kvHeads * d, c.kvHeads * d, d, 1}));
    expect(vPagesDesc_.set(c.dtype, {numPages_, c.pageSize, c.kvHeads, dv}, {c.vPageStride(), c.kvHeads * dv, dv, 1}));

    // The dense cache of the same keys, NaN past each sequence's.
    std::vector<int32_t> cuK{0};
    for (int64_t b = 0; b < B; ++b) cuK.push_back(cuK.back() + int32_t(rp_.seqK(b)));
    // Ragged [keys, kvHeads, width] or padded [b, kvHeads, cap, width] in BSHD order; width d for K and dv for V.
    auto denseDims = [&](int64_t width) -> std::vector<int64_t> {
      return c.raggedQ ? std::vector<int64_t>{std::max<int64_t>(cuK.back(), 1), c.kvHeads, width}
                       : std::vector<int64_t>{B, c.kvHeads, capacity_, width};
    };
    auto denseStrides = [&](int64_t width) -> std::vector<int64_t> {
      return c.raggedQ ? std::vector<int64_t>{c.kvHeads * width, width, 1}
                       : std::vector<int64_t>{capacity_ * c.kvHeads * width, width, c.kvHeads * width, 1};
    };
    HostTensor kd(c.dtype, denseDims(d), denseStrides(d)), vd(c.dtype, denseDims(dv), denseStrides(dv));
    kd.fillNaN();
    vd.fillNaN();
    for (HostTensor *t : {&kd, &vd}) {
      const bool isK = t == &kd;
      const int64_t width = isK ? d : dv;
      const std::vector<double> &canon = isK ? k_canon_ : v_canon_;
      const std::vector<int64_t> &st = t->strides;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < c.kvHeads; ++h)
          for (int64_t j = 0; j < rp_.seqK(b); ++j)
            for (int64_t x = 0; x < width; ++x) {
              const size_t src = size_t(((b * c.kvHeads + h) * capacity_ + j) * width + x);
              const int64_t at = c.raggedQ ? (cuK[size_t(b)] + j) * st[0] + h * st[1] + x
                                           : b * st[0] + h * st[1] + j * st[2] + x;
              storeElement(t->bytes.data(), c.dtype, at, canon[src]);
            }
    }
    kDense_ = DeviceBuffer(kd);
    vDense_ = DeviceBuffer(vd);
    expect(denseDesc_.set(c.dtype, kd.dims, kd.strides));
    expect(vDenseDesc_.set(c.dtype, vd.dims, vd.strides));

    std::vector<int32_t> lens(rp_.sk.begin(), rp_.sk.end()), cuQ(cuQHost_.begin(), cuQHost_.end());
    lens_ = DeviceBuffer(lens.data(), lens.size() * 4);
    table_ = DeviceBuffer(tableHost_.data(), tableHost_.size() * 4);
    cuQ_ = DeviceBuffer(cuQ.data(), cuQ.size() * 4);
    cuK_ = DeviceBuffer(cuK.data(), cuK.size() * 4);
    if (c.raggedQ) {
      expect(flashAttnSetSeqRagged(pagedSeq_, B, cuQ_.get<int32_t>(), nullptr, maxQ, capacity_));
      expect(flashAttnSetSeqRagged(denseSeq_, B, cuQ_.get<int32_t>(), cuK_.get<int32_t>(), maxQ, capacity_));
    } else {
      expect(flashAttnSetSeqKvLengths(denseSeq_, B, lens_.get<int32_t>()));
    }
    expect(flashAttnSetSeqKvLengths(pagedSeq_, B, lens_.get<int32_t>()));
    expect(flashAttnSetSeqPaged(pagedSeq_, B, table_.get<int32_t>(), pagesPerSeq_));

    expect(flashAttnSetAttentionScale(attn_, scale));
    expect(flashAttnSetAttentionMask(attn_, c.mask));
    expect(flashAttnSetAttentionWindow(attn_, c.windowLeft, c.windowRight));
    expect(flashAttnSetAttentionSoftcap(attn_, c.softcap));
    if (c.alibi) {
      slopes_ = DeviceBuffer(slopes.data(), slopes.size() * 4);
      expect(flashAttnSetAttentionAlibiSlopes(attn_, slopes_.get<float>(), 0));
    }
    if (c.sinks) {
      sinks_ = DeviceBuffer(sinks.data(), sinks.size() * 4);
      expect(flashAttnSetAttentionSinks(attn_, sinks_.get<float>()));
    }
  }

  static void expect(flashAttnStatus_t s) {
    if (s != FLASHATTN_STATUS_SUCCESS) throw std::runtime_error("test setup failed: " + lastError());
  }

  PagedCase c_;
  Handle handle_{FLASHATTN_BACKEND_CUDA};
  AttnDesc attn_;
  SeqDesc pagedSeq_, denseSeq_;
  TensorDesc qDesc_, oDesc_, lseDesc_, pagesDesc_, vPagesDesc_, denseDesc_, vDenseDesc_;
  DeviceBuffer q_, o_, lse_, kPages_, vPages_, kDense_, vDense_, lens_, table_, cuQ_, cuK_, slopes_, sinks_;
  HostTensor oHost_;
  fa_ref::Problem rp_;
  std::vector<double> q_canon_, k_canon_, v_canon_;
  std::vector<int32_t> tableHost_;
  std::vector<int64_t> cuQHost_;
  std::vector<int64_t> qDims_, qStrides_;
  int64_t pagesPerSeq_ = 0, capacity_ = 0, numPages_ = 0, lseElements_ = 0;
};

const flashAttnDataType_t kTypes[] = {FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16, FLASHATTN_DATA_FP32};

// A key count that ends on a page boundary: `keys` rounded up to whole pages.
int64_t onBoundary(int64_t keys, int64_t pageSize) { return (keys + pageSize - 1) / pageSize * pageSize; }

// Pages of 3 whose V pool has a page stride of its own: the Hopper kernel's row-by-row copies then build V's row
// offsets apart from K's (with one layout for both pools, V reuses K's).
PagedCase paddedVPages(uint64_t seed) {
  PagedCase c;
  c.name = "edge_vpad_ps3", c.pageSize = 3, c.heads = 8, c.kvHeads = 2, c.vPagePad = 40;
  c.seqs = {{70, 300}, {5, 0}, {129, 2}}, c.seed = seed;
  return c;
}

std::vector<PagedCase> cases() {
  std::vector<PagedCase> out;
  uint64_t seed = 300;
  if (edgeSliceOnly()) {
    PagedCase a;
    a.name = "edge_ragged_ps3", a.pageSize = 3, a.heads = 4, a.kvHeads = 1, a.headDim = 64;
    a.seqs = {{5, 7}, {0, 4}, {1, 0}, {17, 1}}, a.seed = seed++;
    out.push_back(a);
    PagedCase d = a;
    d.name = "edge_dense_ps16", d.raggedQ = false, d.denseSeqQ = 20, d.pageSize = 16, d.seqs = {{0, 0}, {0, 44}};
    d.dtype = FLASHATTN_DATA_FP32, d.seed = seed++;
    out.push_back(d);
    // Q/K 192 with V/O 128 on pages of 16: the tensor-map page-run copies of the Hopper kernel at two widths.
    PagedCase m;
    m.name = "edge_192v128_ps16", m.headDim = 192, m.headDimV = 128, m.pageSize = 16;
    m.seqs = {{5, 20}, {3, 0}}, m.seed = seed++;
    out.push_back(m);
    // Head dim 96 on pages of 1: the Hopper kernel's row-by-row copies with chunks past the head dim zero-filled.
    PagedCase n = m;
    n.name = "edge_d96_ps1", n.headDim = 96, n.headDimV = 0, n.pageSize = 1, n.seed = seed++;
    out.push_back(n);
    out.push_back(paddedVPages(seed++));
    return out;
  }
  const int64_t pageSizes[] = {1, 3, 16, 64, 256};
  const int64_t gqa[][2] = {{8, 8}, {8, 2}, {8, 1}};  // GQA 1, 4, 8
  int index = 0;
  for (int64_t ps : pageSizes)
    for (flashAttnDataType_t t : kTypes) {
      // Chunked prefill: 512 new tokens over a prefix that ends the sequence on a page boundary, 17 over none, one
      // token after 2999, an empty chunk, a sequence of one key.
      PagedCase c;
      c.name = std::string("prefill_ps") + std::to_string(ps) + "_" + typeName(t);
      c.dtype = t, c.pageSize = ps, c.headDim = t == FLASHATTN_DATA_FP32 ? 64 : 128;
      c.heads = gqa[index % 3][0], c.kvHeads = gqa[index % 3][1];
      c.seqs = {{512, onBoundary(512 + 1000, ps) - 512}, {17, 0}, {1, 2999}, {0, 77}, {1, 0}};
      if (t == FLASHATTN_DATA_FP32) c.seqs[0] = {128, onBoundary(400, ps) - 128};  // the FFMA kernel is slow
      switch (index % 5) {
        case 1: c.sinks = true; break;
        case 2: c.windowLeft = 300, c.windowRight = 0; break;
        case 3: c.softcap = 20.f, c.alibi = true; break;
        case 4: c.withLse = false; break;
        default: break;
      }
      c.seed = seed++;
      out.push_back(c);
      // A dense Q over the same kind of cache: the same 33 rows for every sequence (empty rows where a sequence has
      // fewer keys under the bottom-right mask); KV lengths 0, a page boundary and a long one.
      PagedCase d;
      d.name = std::string("denseq_ps") + std::to_string(ps) + "_" + typeName(t);
      d.dtype = t, d.pageSize = ps, d.headDim = 64, d.raggedQ = false, d.denseSeqQ = 33;
      d.heads = gqa[(index + 1) % 3][0], d.kvHeads = gqa[(index + 1) % 3][1];
      d.seqs = {{0, 0}, {0, onBoundary(100, ps)}, {0, 1800}};
      d.mask = index % 2 ? FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT : FLASHATTN_MASK_NONE;
      d.sparePagesPerSeq = 3;
      d.seed = seed++;
      out.push_back(d);
      ++index;
    }
  // Top-left causal over a chunk with a prefix (sees only the prefix's first rows), and fewer keys than new tokens.
  PagedCase tl;
  tl.name = "top_left_and_short_prefix", tl.pageSize = 16, tl.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  tl.seqs = {{300, 50}, {64, 0}}, tl.seed = seed++;
  out.push_back(tl);
  // Wide heads, where the Hopper kernel copies runs of whole pages (page sizes that are multiples of 8) by tensor
  // map: V/O narrower than Q/K (192 and 128, MLA prefill) and 256. Chunked prefill of 17 new tokens over none, 512
  // over a prefix that ends the sequence on a page boundary and one over 70; a dense Q over KV lengths 0, a page
  // boundary and a long one.
  auto chunked = [&](const std::string &name, flashAttnDataType_t t, int64_t d, int64_t dv, int64_t ps,
                     int64_t kvHeads) {
    PagedCase c;
    c.name = name, c.dtype = t, c.headDim = d, c.headDimV = dv, c.pageSize = ps, c.heads = 8, c.kvHeads = kvHeads;
    c.seqs = {{17, 0}, {512, onBoundary(1000, ps)}, {1, 70}}, c.seed = seed++;
    out.push_back(c);
  };
  auto denseQ = [&](const std::string &name, flashAttnDataType_t t, int64_t d, int64_t dv, int64_t ps,
                    int64_t kvHeads, flashAttnMaskMode_t mask) {
    PagedCase c;
    c.name = name, c.dtype = t, c.headDim = d, c.headDimV = dv, c.pageSize = ps, c.heads = 8, c.kvHeads = kvHeads;
    c.raggedQ = false, c.denseSeqQ = 33, c.mask = mask, c.sparePagesPerSeq = 3;
    c.seqs = {{0, 0}, {0, onBoundary(100, ps)}, {0, 1800}}, c.seed = seed++;
    out.push_back(c);
  };
  chunked("mla_192v128_ps16", FLASHATTN_DATA_BF16, 192, 128, 16, 2);
  denseQ("mla_192v128_ps64_dense", FLASHATTN_DATA_BF16, 192, 128, 64, 2, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT);
  chunked("mla_192v128_ps256_fp16", FLASHATTN_DATA_FP16, 192, 128, 256, 1);
  chunked("d256_ps16", FLASHATTN_DATA_FP16, 256, 0, 16, 2);
  // Row-by-row copies (pages of 1 and 3) at the other widths: 96 (zero-filled past the head dim), 192 with 128, and
  // 256 (80-key blocks: a partial pass of rows).
  chunked("d96_ps1", FLASHATTN_DATA_BF16, 96, 0, 1, 2);
  chunked("mla_192v128_ps1", FLASHATTN_DATA_BF16, 192, 128, 1, 2);
  chunked("d256_ps3", FLASHATTN_DATA_FP16, 256, 0, 3, 2);
  denseQ("d256_ps64_dense", FLASHATTN_DATA_BF16, 256, 0, 64, 8, FLASHATTN_MASK_NONE);
  // What a server meets at length: 17 new tokens and one over prefixes of 64k keys, 16 query heads on one KV head, on
  // vLLM's pages of 16 (page runs by tensor map on Hopper) and SGLang's of 1 (row by row).
  for (int64_t ps : {16, 1}) {
    PagedCase c;
    c.name = "long_prefix_64k_gqa16_ps" + std::to_string(ps);
    c.dtype = ps == 1 ? FLASHATTN_DATA_FP16 : FLASHATTN_DATA_BF16;
    c.heads = 16, c.kvHeads = 1, c.pageSize = ps;
    c.seqs = {{17, 65536}, {1, 65536 - 3}}, c.seed = seed++;
    out.push_back(c);
  }
  out.push_back(paddedVPages(seed++));
  return out;
}

std::string caseName(const ::testing::TestParamInfo<PagedCase> &info) { return info.param.name; }

class PagedForward : public ::testing::TestWithParam<PagedCase> {};

TEST_P(PagedForward, MatchesOracleAndDenseCacheBitwise) {
  const PagedCase &c = GetParam();
  SKIP_UNLESS_BUILT_AT_LEAST(Family::Forward, c.dtype, c.headDim, c.headDimV);
  PagedFixture f(c);
  EXPECT_EQ(f.workspaceBytes(true), f.workspaceBytes(false)) << "the forward sizes its workspace from the shapes";
  const flashAttnStatus_t s = f.run(true);
  ASSERT_EQ(s, FLASHATTN_STATUS_SUCCESS) << lastError();
  bool pass = false;
  const std::string text = f.verify(&pass);
  EXPECT_TRUE(pass) << text;
  std::cout << "[paged] " << c.name << ": " << text << "\n";
  const std::vector<uint8_t> o = f.rawO(), lse = f.rawLse();
  ASSERT_EQ(f.run(true), FLASHATTN_STATUS_SUCCESS) << lastError();
  EXPECT_TRUE(f.rawO() == o && f.rawLse() == lse) << "a repeated run differs bitwise";
  // The same keys in a dense cache: the kernel visits the same key blocks in the same order, so where the same
  // family serves both the bytes are the same.
  ASSERT_EQ(f.run(false), FLASHATTN_STATUS_SUCCESS) << lastError();
  const std::string pagedFamily = f.family(true), denseFamily = f.family(false);
  if (pagedFamily == denseFamily) {
    if (f.rawO() != o) {
      bool densePass = false;
      const std::string denseText = f.verify(&densePass);
      const std::string difference = f.describeDifference(o);
      const std::vector<uint8_t> dense = f.rawO();
      ASSERT_EQ(f.run(false), FLASHATTN_STATUS_SUCCESS) << lastError();
      ADD_FAILURE() << "O differs between the paged and the dense cache (" << pagedFamily << "): " << difference
                    << "; paged: " << text << "; dense: " << denseText << "; the dense run "
                    << (f.rawO() == dense ? "repeats bitwise" : "does not repeat bitwise");
    }
    EXPECT_TRUE(f.rawLse() == lse) << "LSE differs between the paged and the dense cache (" << pagedFamily << ")";
  } else {
    bool densePass = false;
    const std::string denseText = f.verify(&densePass);
    EXPECT_TRUE(densePass) << "dense cache (" << denseFamily << "): " << denseText;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedForward, ::testing::ValuesIn(cases()), caseName);

// Captured once, replayed with other lengths (new tokens and keys), query offsets and a shuffled block table written
// into device memory between replays: each replay equals an eager run on the same index data, which passes the gates.
TEST(PagedForwardGraph, ReplayWithChangedLengthsAndTablesEqualsEager) {
  for (const bool ragged : {true, false}) {
    SCOPED_TRACE(ragged ? "ragged Q" : "dense Q");
    PagedCase c;
    c.name = "graph";
    c.pageSize = 16, c.heads = 8, c.kvHeads = 2, c.raggedQ = ragged, c.denseSeqQ = ragged ? 0 : 40;
    c.seqs = {{200, 600}, {17, 0}, {40, 333}};
    c.sparePagesPerSeq = 2;
    c.seed = ragged ? 91 : 92;
    SKIP_UNLESS_BUILT_AT_LEAST(Family::Forward, c.dtype, c.headDim, c.headDimV);
    PagedFixture f(c);
    // The second index data: other lengths within the tensors (as many query tokens in all, keys within the
    // capacity), and the pages of sequences 0 and 2 swapped.
    std::vector<Sequence> seqsA = c.seqs, seqsB = {{100, 651}, {117, 40}, {40, 0}};
    if (!ragged) seqsB = {{0, 640}, {0, 1}, {0, 0}};
    std::vector<int32_t> tableA = f.table(), tableB = tableA;
    for (int64_t pg = 0; pg < f.pagesPerSeq(); ++pg)
      std::swap(tableB[size_t(pg)], tableB[size_t(2 * f.pagesPerSeq() + pg)]);
    // Entries past the pages a sequence uses: the same garbage as the builder writes there.
    auto fixTail = [&](std::vector<int32_t> &table, const std::vector<Sequence> &seqs) {
      for (size_t b = 0; b < seqs.size(); ++b) {
        const int64_t keys = seqs[b].prefix + (ragged ? seqs[b].newTokens : 0);
        for (int64_t pg = (keys + c.pageSize - 1) / c.pageSize; pg < f.pagesPerSeq(); ++pg)
          table[size_t(int64_t(b) * f.pagesPerSeq() + pg)] = int32_t(pg % 2 ? -7 : f.numPages() + 5);
      }
    };
    // Sequence 0 of B uses fewer pages than of A, 2 more: give every table the used pages of both from A's pool.
    std::vector<int32_t> pool(tableA);
    std::sort(pool.begin(), pool.end());
    pool.erase(std::remove_if(pool.begin(), pool.end(), [&](int32_t id) { return id < 0 || id >= f.numPages(); }),
               pool.end());
    size_t next = 0;
    for (size_t b = 0; b < seqsB.size(); ++b) {
      const int64_t keys = seqsB[b].prefix + (ragged ? seqsB[b].newTokens : 0);
      for (int64_t pg = 0; pg < (keys + c.pageSize - 1) / c.pageSize; ++pg)
        tableB[size_t(int64_t(b) * f.pagesPerSeq() + pg)] = pool[next++ % pool.size()];
    }
    fixTail(tableB, seqsB);

    cudaStream_t stream = nullptr;
    FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ASSERT_EQ(flashAttnSetStream(f.handle(), stream), FLASHATTN_STATUS_SUCCESS);
    std::vector<uint8_t> eagerO[2], eagerL[2];
    for (int which = 0; which < 2; ++which) {
      f.setIndexData(which ? seqsB : seqsA, which ? tableB : tableA);
      ASSERT_EQ(f.run(true), FLASHATTN_STATUS_SUCCESS) << lastError();
      bool pass = false;
      const std::string text = f.verify(&pass);
      EXPECT_TRUE(pass) << "eager, index data " << which << ": " << text;
      eagerO[which] = f.rawO();
      eagerL[which] = f.rawLse();
    }
    f.setIndexData(seqsA, tableA);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    FA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const flashAttnStatus_t captured = f.enqueue(true);
    FA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ASSERT_EQ(captured, FLASHATTN_STATUS_SUCCESS) << lastError();
    FA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int which : {1, 0, 1}) {
      f.setIndexData(which ? seqsB : seqsA, which ? tableB : tableA);
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
}

}  // namespace
