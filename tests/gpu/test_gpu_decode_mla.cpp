// SPDX-License-Identifier: BSD-3-Clause
// Absorbed-MLA decode (DeepSeek-V3 style) through flashAttnDecodeChunk on the CUDA backend, against the float64
// oracle (fa_ref::forward over each sequence's used KV length) under both test gates: Q/K head dim 576 (512 latent +
// 64 RoPE), V/O head dim 512, FP16 and BF16; one KV head with 16, 64 and 128 query heads, and 2 KV heads of 16 query
// heads each (the general GQA path); 1, 2 and 4 query tokens, causal (bottom-right) and unmasked; caches of 1, 63, 64,
// 65, 1000 and 20000 keys; per-sequence lengths 0, 1, 64, 128 and others, with NaN in every cache slot no sequence
// uses (and in unreferenced pages; garbage in the table entries past each sequence's last page); V as K's first 512
// columns (the V descriptor with K's pointer and strides, as an absorbed cache is stored) and V as a tensor of its
// own; dense and paged caches (pages of 64 and 128 rows, block tables from a shuffled pool); sinks on one case; LSE
// checked; 1 and 3 chunks and the automatic count, each run twice (bitwise repeatable); outputs NaN-poisoned first.
//
// flashAttnCheckSupport must say SUCCESS exactly when the run (and its size query) succeeds, and a refused call writes
// nothing. On an sm90 GPU whose build compiled the sm_90a MLA instance of the dtype (built_instances.hpp, from the
// build's instance lists) a refusal of any case here is a failure: the wgmma decode is meant to serve them
// all. Elsewhere (other GPUs, the portable families of the *_portable variant, builds without those instances) a
// refusal is allowed, but must be consistent. Softcap, which that kernel does not take, must be refused by both
// CheckSupport and DecodeChunk with a message naming it, and write nothing.
//
// FLASHATTN_TEST_SLICE=edge runs a few small shapes only (for compute-sanitizer).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
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

constexpr int64_t kDimQK = 576, kDimV = 512;

// Whether this build compiled the sm_90a absorbed-MLA decode instance of `t` (head dims 576 and 512 in
// FLASHATTN_HEAD_DIMS, an sm90 architecture): only then must an sm90 GPU serve the cases.
bool buildHasMlaInstance(flashAttnDataType_t t) { return builtInstance(Family::DecodeSm90, t, kDimQK, kDimV); }

bool mustBeServed(flashAttnDataType_t t) { return deviceIsSm90() && buildHasMlaInstance(t); }

std::string lower(std::string s) {
  for (char &ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

struct MlaCase {
  std::string name;
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t batch = 1, heads = 16, kvHeads = 1, sq = 1;
  int64_t cap = 64;            // dense seqK; paged: rounded up to whole pages
  std::vector<int32_t> lens;   // per-sequence used lengths; empty: the whole cache, no seqlensK (dense only)
  bool paged = false;
  int64_t pageSize = 64;
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  bool vInK = true;  // V = K's first 512 columns (V's pointer and strides are K's); false: a V tensor of its own
  bool sinks = false;
  bool withLse = true;
  float softcap = 0.f;
  std::vector<int32_t> chunks = {0, 1, 3};
  uint64_t seed = 1;
};

// fa_ref::forward per (sequence, KV head), the group's query heads split over the host's cores: with one KV head every
// query head is in one group, which fa_test::referenceForwardByKvGroup would give a single core. Each part is the same
// oracle on a slice of the canonical inputs, the group's used keys copied once.
void referenceByHeads(const fa_ref::Problem &p, const std::vector<double> &q, const std::vector<double> &k,
                      const std::vector<double> &v, std::vector<double> &o, std::vector<double> &lse,
                      fa_ref::Rounding r) {
  o.assign(p.oSize(), 0.0);
  lse.assign(p.lseSize(), -INFINITY);
  const int64_t G = p.heads / p.kvHeads, sq = p.maxSq;
  const unsigned threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 32u));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t kvh = 0; kvh < p.kvHeads; ++kvh) {
      const int64_t sk = p.seqK(b), rows = std::max<int64_t>(sk, 1);
      const size_t k0 = size_t((b * p.kvHeads + kvh) * p.maxSk) * size_t(p.headDim);
      const size_t v0 = size_t((b * p.kvHeads + kvh) * p.maxSk) * size_t(p.headDimV);
      std::vector<double> ks(size_t(rows * p.headDim), 0.0), vs(size_t(rows * p.headDimV), 0.0);
      std::copy(k.begin() + k0, k.begin() + k0 + size_t(sk * p.headDim), ks.begin());
      std::copy(v.begin() + v0, v.begin() + v0 + size_t(sk * p.headDimV), vs.begin());
      const int64_t per = (G + threads - 1) / threads;
      std::vector<std::thread> pool;
      for (int64_t h0 = 0; h0 < G; h0 += per) {
        pool.emplace_back([&, h0] {
          const int64_t n = std::min(per, G - h0), first = b * p.heads + kvh * G + h0;
          fa_ref::Problem sp = p;
          sp.batch = 1, sp.heads = n, sp.kvHeads = 1, sp.maxSk = rows;
          sp.sq = {p.seqQ(b)};
          sp.sk = {sk};
          sp.alibi.clear();
          sp.sinks.clear();
          for (int64_t h = 0; h < n && !p.sinks.empty(); ++h) sp.sinks.push_back(p.sinks[size_t(kvh * G + h0 + h)]);
          const auto qb = q.begin() + first * sq * p.headDim;
          const std::vector<double> qs(qb, qb + n * sq * p.headDim);
          std::vector<double> os, ls;
          fa_ref::forward(sp, qs, ks, vs, os, ls, r);
          std::copy(os.begin(), os.end(), o.begin() + first * sq * p.headDimV);
          std::copy(ls.begin(), ls.end(), lse.begin() + first * sq);
        });
      }
      for (auto &t : pool) t.join();
    }
}

// What one DecodeChunk call answered: the size query's status and the call's, with their messages.
struct CallResult {
  flashAttnStatus_t query = FLASHATTN_STATUS_INTERNAL_ERROR, run = FLASHATTN_STATUS_INTERNAL_ERROR;
  std::string queryMessage, runMessage;
};

class MlaFixture {
 public:
  explicit MlaFixture(const MlaCase &c) : c_(c) { build(); }

  flashAttnStatus_t checkSupport(std::string *description) {
    char text[512] = {};
    const flashAttnStatus_t s = flashAttnCheckSupport(handle_, FLASHATTN_OP_DECODE_CHUNK, attn_, seqDesc(), qDesc_,
                                                      kDesc_, vDesc_, oDesc_, text, sizeof text, nullptr);
    *description = text;
    return s;
  }

  CallResult run(int32_t chunks) {
    CallResult r;
    size_t bytes = 0;
    r.query = flashAttnDecodeChunkGetWorkspaceSize(handle_, attn_, seqDesc(), qDesc_, kDesc_, vDesc_, oDesc_,
                                                   lseDescOrNull(), chunks, &bytes);
    if (r.query != FLASHATTN_STATUS_SUCCESS) {
      r.queryMessage = lastError();
      // A refused problem has no size: 64 MiB, so that the call's answer cannot be about its workspace.
      bytes = size_t(64) << 20;
    }
    // Kept across the case's calls as a decode loop keeps it (the first call finds 0xFF bytes).
    if (ws_.bytes < bytes) {
      ws_ = DeviceBuffer(bytes);
      ws_.poison();
    }
    r.run = flashAttnDecodeChunk(handle_, attn_, seqDesc(), qDesc_, q_.ptr, kDesc_, k_.ptr, vDesc_, vPtr(), oDesc_,
                                 o_.ptr, lseDescOrNull(), c_.withLse ? lse_.get<float>() : nullptr, chunks, ws_.ptr,
                                 bytes);
    if (r.run == FLASHATTN_STATUS_SUCCESS)
      FA_CUDA_CHECK(cudaDeviceSynchronize());
    else
      r.runMessage = lastError();
    return r;
  }

  void poisonOutputs() {
    o_.poison();
    lse_.poison();
  }
  std::vector<uint8_t> rawO() const { return o_.raw(); }
  std::vector<uint8_t> rawLse() const { return lse_.raw(); }

  // Both gates on O, the LSE gate, finiteness. Returns a description; sets *pass. The oracle runs on first need only:
  // a refused case costs no host time.
  std::string check(bool *pass) {
    if (oRef_.empty()) {
      referenceByHeads(problem_, q_canon_, k_canon_, v_canon_, oRef_, lseRef_, fa_ref::Rounding::None);
      std::vector<double> lseLp;
      referenceByHeads(problem_, q_canon_, k_canon_, v_canon_, oLp_, lseLp, roundingOf(c_.dtype));
    }
    HostTensor o = oHost_;
    o_.download(o);
    const std::vector<double> out = unpack4(o);
    const fa_ref::Gate g = fa_ref::checkGates(out, oRef_, oLp_, 2.0, fa_ref::normTolerance(roundingOf(c_.dtype)));
    *pass = g.pass;
    std::string text = "O " + g.describe();
    if (c_.withLse) {
      std::vector<float> l(size_t(c_.batch * c_.heads * c_.sq));
      FA_CUDA_CHECK(cudaMemcpy(l.data(), lse_.ptr, l.size() * 4, cudaMemcpyDeviceToHost));
      const fa_ref::Gate gl = fa_ref::checkLse(std::vector<double>(l.begin(), l.end()), lseRef_,
                                               lseTolerance(c_.dtype, lseRef_));
      *pass = *pass && gl.pass;
      text += "; LSE " + gl.describe();
    }
    return text;
  }

 private:
  flashAttnSeqDescriptor_t seqDesc() const { return useSeq_ ? flashAttnSeqDescriptor_t(seq_) : nullptr; }
  flashAttnTensorDescriptor_t lseDescOrNull() const {
    return c_.withLse ? flashAttnTensorDescriptor_t(lseDesc_) : nullptr;
  }
  const void *vPtr() const { return c_.vInK ? k_.ptr : v_.ptr; }

  static void expectOk(flashAttnStatus_t s) {
    if (s != FLASHATTN_STATUS_SUCCESS) throw std::runtime_error("descriptor setup failed: " + lastError());
  }

  void build() {
    const MlaCase &c = c_;
    std::mt19937_64 rng(c.seed);
    const int64_t pagesPerSeq = c.paged ? (c.cap + c.pageSize - 1) / c.pageSize : 0;
    const int64_t capacity = c.paged ? pagesPerSeq * c.pageSize : c.cap;
    useSeq_ = !c.lens.empty() || c.paged;
    std::vector<int32_t> lens(size_t(c.batch), int32_t(capacity));
    if (!c.lens.empty()) lens = c.lens;

    // Canonical inputs: q [b][h][i][576], k [b][kvh][j][576], v [b][kvh][j][512]; V inside K is K's first columns.
    q_canon_ = randomValues(rng, size_t(c.batch * c.heads * c.sq * kDimQK), c.dtype);
    k_canon_ = randomValues(rng, size_t(c.batch * c.kvHeads * capacity * kDimQK), c.dtype);
    if (c.vInK) {
      v_canon_.resize(size_t(c.batch * c.kvHeads * capacity * kDimV));
      for (size_t row = 0; row < size_t(c.batch * c.kvHeads * capacity); ++row)
        std::copy_n(k_canon_.begin() + row * kDimQK, kDimV, v_canon_.begin() + row * kDimV);
    } else {
      v_canon_ = randomValues(rng, size_t(c.batch * c.kvHeads * capacity * kDimV), c.dtype);
    }

    problem_.batch = c.batch, problem_.heads = c.heads, problem_.kvHeads = c.kvHeads;
    problem_.headDim = kDimQK, problem_.headDimV = kDimV;
    problem_.maxSq = c.sq, problem_.maxSk = capacity;
    problem_.sk.assign(lens.begin(), lens.end());
    problem_.softcap = c.softcap;
    problem_.mask = fa_ref::Mask(int(c.mask));
    std::vector<float> sinks;
    if (c.sinks) {
      // Some sinks far above every logit of their rows (their O near 0), the others among the logits.
      std::uniform_real_distribution<double> u(-3.0, 3.0);
      for (int64_t h = 0; h < c.heads; ++h) sinks.push_back(float(h % 4 == 3 ? 40.0 : u(rng)));
      problem_.sinks.assign(sinks.begin(), sinks.end());
    }

    const HostTensor qh = pack4(q_canon_, c.dtype, c.batch, c.heads, c.sq, kDimQK, Order::BHSD);
    q_ = DeviceBuffer(qh);
    oHost_ = HostTensor(c.dtype, {c.batch, c.heads, c.sq, kDimV}, stridesFor(Order::BHSD, c.batch, c.heads, c.sq, kDimV));
    o_ = DeviceBuffer(oHost_.bytes.size());
    lse_ = DeviceBuffer(size_t(c.batch * c.heads * c.sq * 4));
    expectOk(qDesc_.set(c.dtype, qh.dims, qh.strides));
    expectOk(oDesc_.set(c.dtype, oHost_.dims, oHost_.strides));
    expectOk(lseDesc_.set(FLASHATTN_DATA_FP32, {c.batch, c.heads, c.sq}, {c.heads * c.sq, c.sq, 1}));

    // Caches in storage order, every element NaN until a used key's value is written: slots past each sequence's
    // length, unreferenced pages (and, with V inside K, nothing else, since V's columns are K's).
    const size_t es = elementSize(c.dtype);
    const int64_t numPages = c.paged ? c.batch * pagesPerSeq + 3 : 0;  // 3 pages no table row references
    std::vector<int32_t> table;
    // Element offset of key j of (b, kvh) in a cache of rows `width` wide: [b, kvh, j, :] dense,
    // [page, j % pageSize, kvh, :] paged.
    auto rowOffset = [&](int64_t b, int64_t kvh, int64_t j, int64_t width) -> int64_t {
      if (!c.paged) return ((b * c.kvHeads + kvh) * capacity + j) * width;
      const int64_t page = table[size_t(b * pagesPerSeq + j / c.pageSize)];
      return ((page * c.pageSize + j % c.pageSize) * c.kvHeads + kvh) * width;
    };
    if (c.paged) {
      std::vector<int32_t> perm(static_cast<size_t>(numPages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      table.assign(size_t(c.batch * pagesPerSeq), 0);
      for (int64_t s = 0; s < c.batch; ++s)
        for (int64_t pg = 0; pg < pagesPerSeq; ++pg) {
          const bool used = pg * c.pageSize < lens[size_t(s)];
          // Entries past the used length are garbage the kernel must never dereference.
          table[size_t(s * pagesPerSeq + pg)] = used ? perm[size_t(s * pagesPerSeq + pg)]
                                                     : int32_t(pg % 2 ? -7 : numPages + 5);
        }
    }
    const int64_t rowsInStore = c.paged ? numPages * c.pageSize : c.batch * capacity;
    auto fillCache = [&](const std::vector<double> &canon, int64_t width) {
      std::vector<uint8_t> bytes(size_t(rowsInStore * c.kvHeads * width) * es);
      for (int64_t i = 0; i < int64_t(bytes.size() / es); ++i) storeElement(bytes.data(), c.dtype, i, NAN);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t kvh = 0; kvh < c.kvHeads; ++kvh)
          for (int64_t j = 0; j < lens[size_t(b)]; ++j) {
            const int64_t at = rowOffset(b, kvh, j, width);
            const size_t from = size_t(((b * c.kvHeads + kvh) * capacity + j) * width);
            for (int64_t d = 0; d < width; ++d) storeElement(bytes.data(), c.dtype, at + d, canon[from + size_t(d)]);
          }
      return DeviceBuffer(bytes.data(), bytes.size());
    };
    k_ = fillCache(k_canon_, kDimQK);
    if (!c.vInK) v_ = fillCache(v_canon_, kDimV);
    // V inside K: V's descriptor is 512 wide with K's strides (rows of 576), so V's pointer is K's.
    const int64_t vPitch = c.vInK ? kDimQK : kDimV;
    if (c.paged) {
      expectOk(kDesc_.set(c.dtype, {numPages, c.pageSize, c.kvHeads, kDimQK},
                          {c.pageSize * c.kvHeads * kDimQK, c.kvHeads * kDimQK, kDimQK, 1}));
      expectOk(vDesc_.set(c.dtype, {numPages, c.pageSize, c.kvHeads, kDimV},
                          {c.pageSize * c.kvHeads * vPitch, c.kvHeads * vPitch, vPitch, 1}));
      table_ = DeviceBuffer(table.data(), table.size() * 4);
      expectOk(flashAttnSetSeqPaged(seq_, c.batch, table_.get<int32_t>(), pagesPerSeq));
    } else {
      expectOk(kDesc_.set(c.dtype, {c.batch, c.kvHeads, capacity, kDimQK},
                          {c.kvHeads * capacity * kDimQK, capacity * kDimQK, kDimQK, 1}));
      expectOk(vDesc_.set(c.dtype, {c.batch, c.kvHeads, capacity, kDimV},
                          {c.kvHeads * capacity * vPitch, capacity * vPitch, vPitch, 1}));
    }
    if (useSeq_) {
      lens_ = DeviceBuffer(lens.data(), lens.size() * 4);
      expectOk(flashAttnSetSeqKvLengths(seq_, c.batch, lens_.get<int32_t>()));
    }
    expectOk(flashAttnSetAttentionMask(attn_, c.mask));
    expectOk(flashAttnSetAttentionSoftcap(attn_, c.softcap));
    if (c.sinks) {
      sinks_ = DeviceBuffer(sinks.data(), sinks.size() * 4);
      expectOk(flashAttnSetAttentionSinks(attn_, sinks_.get<float>()));
    }
  }

  MlaCase c_;
  Handle handle_{FLASHATTN_BACKEND_CUDA};
  AttnDesc attn_;
  SeqDesc seq_;
  TensorDesc qDesc_, kDesc_, vDesc_, oDesc_, lseDesc_;
  DeviceBuffer q_, k_, v_, o_, lse_, lens_, table_, sinks_, ws_;
  HostTensor oHost_;
  fa_ref::Problem problem_;
  std::vector<double> q_canon_, k_canon_, v_canon_;
  std::vector<double> oRef_, lseRef_, oLp_;
  bool useSeq_ = false;
};

std::vector<MlaCase> gridCases() {
  const flashAttnDataType_t bf16 = FLASHATTN_DATA_BF16, fp16 = FLASHATTN_DATA_FP16;
  const flashAttnMaskMode_t none = FLASHATTN_MASK_NONE, causal = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  std::vector<MlaCase> cases;
  cases.reserve(64);  // `add` hands out pointers into it, which a reallocation would invalidate
  uint64_t seed = 500;
  auto add = [&](const std::string &name, flashAttnDataType_t t, int64_t batch, int64_t heads, int64_t kvHeads,
                 int64_t sq, flashAttnMaskMode_t mask, int64_t cap, std::vector<int32_t> lens, bool vInK) {
    MlaCase c;
    c.name = name + "_" + typeName(t) + (vInK ? "_v_in_k" : "_v_own");
    c.dtype = t, c.batch = batch, c.heads = heads, c.kvHeads = kvHeads, c.sq = sq, c.mask = mask, c.cap = cap;
    c.lens = std::move(lens), c.vInK = vInK, c.seed = seed++;
    cases.push_back(c);
    return &cases.back();
  };
  if (edgeSliceOnly()) {
    add("L65_h16_sq2_causal", bf16, 2, 16, 1, 2, causal, 65, {65, 1}, true)->chunks = {0, 3};
    add("L200_h16_sq1_lens", fp16, 3, 16, 1, 1, none, 200, {0, 129, 64}, false)->chunks = {0, 3};
    MlaCase *p = add("paged64_h16_sq1", bf16, 2, 16, 1, 1, none, 200, {200, 65}, true);
    p->paged = true, p->chunks = {0, 3};
    // 64-row blocks (the wide kernel): two blocks with V inside K, one with V of its own (one stage; one chunk of
    // three tiles walks that stage more than once).
    add("L200_h64_sq2_causal", bf16, 2, 64, 1, 2, causal, 200, {200, 65}, true)->chunks = {0, 3};
    add("L130_h64_sq1", fp16, 2, 64, 1, 1, none, 130, {130, 64}, false)->chunks = {0, 1, 3};
    MlaCase *w = add("paged128_h128_sq1", bf16, 1, 128, 1, 1, none, 256, {256}, true);
    w->paged = true, w->pageSize = 128, w->chunks = {0, 3};
    return cases;
  }
  // Tiny caches: one key, and one below, at and past a 64-key tile.
  add("L1_h16_sq1", bf16, 2, 16, 1, 1, none, 1, {}, true);
  add("L1_h64_sq4_causal", fp16, 1, 64, 1, 4, causal, 1, {}, true);  // rows 0..2 see no key: O 0, LSE -inf
  add("L63_h64_sq2_causal", fp16, 2, 64, 1, 2, causal, 63, {}, true);
  add("L63_h16_sq4", bf16, 2, 16, 1, 4, none, 63, {}, false);
  add("L64_h128_sq4", bf16, 1, 128, 1, 4, none, 64, {}, false);
  add("L64_h16_sq1", fp16, 3, 16, 1, 1, none, 64, {}, true);
  add("L65_h16_sq4_causal", bf16, 3, 16, 1, 4, causal, 65, {}, true);
  add("L65_h128_sq1", fp16, 2, 128, 1, 1, none, 65, {}, false);
  // Per-sequence lengths over a 1000-key cache: empty and one-key sequences, tile boundaries, NaN past each end.
  add("L1000_lens_h16_sq1", bf16, 6, 16, 1, 1, none, 1000, {0, 1, 64, 128, 1000, 577}, true);
  add("L1000_lens_h128_sq4_causal", bf16, 6, 128, 1, 4, causal, 1000, {1000, 0, 1, 64, 128, 129}, true);
  add("L1000_lens_h128_sq2", fp16, 3, 128, 1, 2, none, 1000, {65, 999, 128}, false);
  add("L1000_lens_h64_sq2_causal", fp16, 4, 64, 1, 2, causal, 1000, {63, 128, 0, 1000}, false);
  add("L1000_h64_sq4", fp16, 2, 64, 1, 4, none, 1000, {}, true);
  add("L1000_h64_sq1_causal", bf16, 2, 64, 1, 1, causal, 1000, {}, true);
  // Long caches: few heads or one sequence, so that the host oracle stays in seconds.
  add("L20000_h16_sq2_causal", bf16, 2, 16, 1, 2, causal, 20000, {20000, 12289}, true);
  add("L20000_h128_sq1", fp16, 1, 128, 1, 1, none, 20000, {}, true);
  add("L20000_h16_sq4", fp16, 1, 16, 1, 4, none, 20000, {19999}, false);
  // Two KV heads of 16 query heads each: the general grouped path.
  add("gqa_kv2_h32_sq4_causal", bf16, 3, 32, 2, 4, causal, 1000, {1000, 64, 1}, true);
  add("gqa_kv2_h32_sq2", fp16, 2, 32, 2, 2, none, 700, {700, 129}, false);
  // Paged caches of 64- and 128-row pages, tables from a shuffled pool.
  add("paged64_h128_sq1", bf16, 4, 128, 1, 1, none, 1000, {1000, 0, 65, 128}, true)->paged = true;
  add("paged64_h64_sq2_causal", fp16, 3, 64, 1, 2, causal, 1000, {1, 640, 999}, false)->paged = true;
  add("paged64_h16_sq1_L20000", bf16, 2, 16, 1, 1, none, 20000, {20000, 1}, true)->paged = true;
  for (MlaCase *c : {add("paged128_h16_sq4_causal", fp16, 4, 16, 1, 4, causal, 1000, {1, 999, 128, 64}, true),
                     add("paged128_h64_sq1", bf16, 3, 64, 1, 1, none, 1000, {257, 0, 1000}, false),
                     add("paged128_gqa_kv2_h32_sq2_causal", bf16, 2, 32, 2, 2, causal, 1000, {1000, 127}, true)}) {
    c->paged = true;
    c->pageSize = 128;
  }
  // Sinks: a sequence with no key (its rows get the sink's LSE and O = 0) and a full one, paged.
  MlaCase *s = add("sinks_paged64_h64_sq2_causal", bf16, 2, 64, 1, 2, causal, 1000, {1000, 0}, true);
  s->paged = true, s->sinks = true;
  // No LSE output: the kernel's path that writes O alone.
  add("no_lse_h16_sq2_causal", bf16, 2, 16, 1, 2, causal, 300, {300, 200}, true)->withLse = false;
  return cases;
}

std::string caseName(const ::testing::TestParamInfo<MlaCase> &info) { return info.param.name; }

class MlaDecode : public ::testing::TestWithParam<MlaCase> {};

TEST_P(MlaDecode, CheckSupportAgreesAndResultsMatchTheFloat64Oracle) {
  const MlaCase &c = GetParam();
  MlaFixture f(c);
  std::string description;
  const flashAttnStatus_t support = f.checkSupport(&description);
  const std::string supportMessage = lastError();
  const bool served = support == FLASHATTN_STATUS_SUCCESS;
  // The problem is valid: the only refusal allowed is NOT_SUPPORTED.
  ASSERT_TRUE(served || support == FLASHATTN_STATUS_NOT_SUPPORTED) << flashAttnGetErrorString(support) << ": "
                                                                    << supportMessage;
  if (!served && mustBeServed(c.dtype))
    ADD_FAILURE() << "flashAttnCheckSupport refuses an absorbed-MLA decode the sm90 wgmma decode of this build is "
                     "meant to serve: "
                  << supportMessage;
  for (int32_t chunks : c.chunks) {
    SCOPED_TRACE("chunks " + std::to_string(chunks) + (served ? ", kernel " + description : ""));
    f.poisonOutputs();
    const std::vector<uint8_t> poisonedO = f.rawO(), poisonedLse = f.rawLse();
    const CallResult r = f.run(chunks);
    EXPECT_EQ(r.query == FLASHATTN_STATUS_SUCCESS, served)
        << "CheckSupport says " << flashAttnGetErrorString(support) << ", the size query "
        << flashAttnGetErrorString(r.query) << ": " << r.queryMessage;
    ASSERT_EQ(r.run == FLASHATTN_STATUS_SUCCESS, served)
        << "CheckSupport says " << flashAttnGetErrorString(support) << " (" << supportMessage << "), DecodeChunk "
        << flashAttnGetErrorString(r.run) << ": " << r.runMessage;
    if (!served) {
      EXPECT_EQ(r.run, FLASHATTN_STATUS_NOT_SUPPORTED) << r.runMessage;
      EXPECT_TRUE(f.rawO() == poisonedO) << "a refused DecodeChunk wrote O";
      EXPECT_TRUE(f.rawLse() == poisonedLse) << "a refused DecodeChunk wrote LSE";
      continue;
    }
    bool pass = false;
    const std::string text = f.check(&pass);
    EXPECT_TRUE(pass) << c.name << " chunks " << chunks << ": " << text;
    const std::vector<uint8_t> o1 = f.rawO(), l1 = f.rawLse();
    f.poisonOutputs();
    ASSERT_EQ(f.run(chunks).run, FLASHATTN_STATUS_SUCCESS) << lastError();
    EXPECT_TRUE(f.rawO() == o1) << "O differs between two runs";
    if (c.withLse) EXPECT_TRUE(f.rawLse() == l1) << "LSE differs between two runs";
  }
  if (!served && !mustBeServed(c.dtype))
    GTEST_SKIP() << "not served here (" << supportMessage << "); refused consistently, nothing written";
}

INSTANTIATE_TEST_SUITE_P(Cuda, MlaDecode, ::testing::ValuesIn(gridCases()), caseName);

// Softcap is outside what the wgmma decode takes: CheckSupport and DecodeChunk both refuse it (NOT_SUPPORTED on every
// GPU: no other CUDA kernel takes head dims 576/512), naming softcap where that kernel is the one that refuses, and
// the refused call leaves O and LSE as they were. Dense and paged, V inside K.
TEST(MlaDecodeSupport, SoftcapIsRefusedAndWritesNothing) {
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "dense");
    MlaCase c;
    c.name = "softcap";
    c.batch = 2, c.heads = 16, c.sq = 2, c.cap = 200, c.lens = {200, 77}, c.paged = paged;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.softcap = 30.f, c.seed = paged ? 901 : 902;
    MlaFixture f(c);
    std::string description;
    const flashAttnStatus_t support = f.checkSupport(&description);
    const std::string supportMessage = lastError();
    EXPECT_EQ(support, FLASHATTN_STATUS_NOT_SUPPORTED) << description << supportMessage;
    f.poisonOutputs();
    const std::vector<uint8_t> poisonedO = f.rawO(), poisonedLse = f.rawLse();
    const CallResult r = f.run(0);
    EXPECT_EQ(r.run, FLASHATTN_STATUS_NOT_SUPPORTED) << r.runMessage;
    EXPECT_TRUE(f.rawO() == poisonedO) << "a refused DecodeChunk wrote O";
    EXPECT_TRUE(f.rawLse() == poisonedLse) << "a refused DecodeChunk wrote LSE";
    if (mustBeServed(c.dtype)) {
      EXPECT_NE(lower(supportMessage).find("softcap"), std::string::npos)
          << "CheckSupport's refusal does not name softcap: " << supportMessage;
      EXPECT_NE(lower(r.runMessage).find("softcap"), std::string::npos)
          << "DecodeChunk's refusal does not name softcap: " << r.runMessage;
    }
  }
}

}  // namespace
