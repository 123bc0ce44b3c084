// SPDX-License-Identifier: BSD-3-Clause
// HOST backend properties that are not one oracle comparison: bitwise determinism (repeated runs, any thread count,
// concurrent handles), the index checks only a host backend can make (cu_seqlens, seqlensK, block tables) with
// outputs left untouched, what CheckSupport reports, and the grid's size.
#include <algorithm>
#include <cstring>
#include <thread>

#include "grid_runner.hpp"

using namespace host_test;

namespace {

size_t alignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

AttnCase determinismCase(flashAttnDataType_t t, uint64_t seed) {
  AttnCase c;
  c.dtype = t;
  c.batch = 2;
  c.heads = 6;
  c.kvHeads = 2;
  c.headDim = 80;
  c.headDimV = 64;
  c.seqQ = 150;
  c.seqK = 201;
  c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  c.windowLeft = 60;
  c.softcap = 7.f;
  c.alibi = 1;
  c.order = fa_test::Order::BSHD;
  c.seed = seed;
  return c;
}

AttnCase raggedDeterminismCase() {
  AttnCase c = determinismCase(FLASHATTN_DATA_BF16, 12001);
  c.raggedQ = {70, 0, 150, 3};
  c.raggedK = {201, 30, 0, 9};
  c.batch = 4;
  c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  c.windowLeft = -1;
  return c;
}

}  // namespace

TEST(HostDeterminism, ForwardBackwardBitwiseAcrossRunsAndThreadCounts) {
  int compared = 0;
  for (const AttnCase &c : {determinismCase(FLASHATTN_DATA_FP16, 12000), determinismCase(FLASHATTN_DATA_FP32, 12002),
                            raggedDeterminismCase()}) {
    AttnOutputs first, again;
    ASSERT_TRUE(runAttnCase(c, true, false, &first).pass) << c.describe();
    ASSERT_TRUE(runAttnCase(c, true, false, &again).pass);
    EXPECT_TRUE(first == again) << "two runs differ: " << c.describe();
    EXPECT_FALSE(first.o.empty() || first.dQ.empty() || first.dK.empty() || first.dV.empty());
    for (int threads : {1, 3, 8}) {
      ScopedThreads scoped(threads);
      AttnOutputs other;
      ASSERT_TRUE(runAttnCase(c, true, false, &other).pass);
      EXPECT_TRUE(first == other) << threads << " threads differ from the default: " << c.describe();
      ++compared;
    }
  }
  std::printf("[grid] determinism forward+backward: %d thread-count comparisons\n", compared);
}

TEST(HostDeterminism, DecodeAndMergeBitwiseAcrossThreadCounts) {
  DecodeCase d;
  d.dtype = FLASHATTN_DATA_BF16;
  d.batch = 3;
  d.heads = 8;
  d.kvHeads = 2;
  d.seqQ = 4;
  d.seqK = 3000;
  d.kvLengths = {3000, 0, 1777};
  d.pageSizes = {16};
  d.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  d.chunks = {0, 7};
  d.seed = 12100;
  const std::vector<DecodeRun> base = runDecodeCase(d);
  for (const DecodeRun &r : base) EXPECT_TRUE(r.report.pass) << r.report.text;
  MergeCase m;
  m.outType = FLASHATTN_DATA_FP16;
  m.states = 9;
  m.batch = 2;
  m.heads = 3;
  m.seqQ = 5;
  m.headDimV = 96;
  m.emptyFraction = 0.4;
  m.seed = 12101;
  AttnOutputs mergeBase;
  EXPECT_TRUE(runMergeCase(m, &mergeBase).pass);
  for (int threads : {1, 2, 5}) {
    ScopedThreads scoped(threads);
    const std::vector<DecodeRun> other = runDecodeCase(d);
    ASSERT_EQ(other.size(), base.size());
    for (size_t i = 0; i < base.size(); ++i)
      EXPECT_TRUE(base[i].outputs == other[i].outputs) << threads << " threads, run " << i;
    AttnOutputs mergeOther;
    runMergeCase(m, &mergeOther);
    EXPECT_TRUE(mergeBase == mergeOther) << threads << " threads";
  }
}

// Handles used from several threads at once share the worker pool; each must get exactly its serial result.
TEST(HostDeterminism, ConcurrentHandlesMatchSerialRuns) {
  const AttnCase cases[] = {determinismCase(FLASHATTN_DATA_FP16, 12200), determinismCase(FLASHATTN_DATA_BF16, 12201),
                            raggedDeterminismCase()};
  AttnOutputs serial[3], concurrent[3];
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(runAttnCase(cases[i], true, false, &serial[i]).pass);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&, i] { runAttnCase(cases[i], true, false, &concurrent[i]); });
  for (auto &t : threads) t.join();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(serial[i] == concurrent[i]) << cases[i].describe();
}

namespace {

// A small ragged forward whose index arrays a test corrupts; O and LSE carry a canary that a failed call must keep.
struct RaggedCall {
  static constexpr int64_t kHeads = 2, kDim = 8, kTokensQ = 10, kTokensK = 12;
  std::vector<int32_t> cuQ{0, 4, 4, 10}, cuK{0, 5, 9, 12};
  int64_t maxQ = 6, maxK = 5;
  std::vector<float> q, k, v, o, lse;
  RaggedCall()
      : q(size_t(kTokensQ * kHeads * kDim), 0.5f),
        k(size_t(kTokensK * kHeads * kDim), 0.25f),
        v(size_t(kTokensK * kHeads * kDim), 1.0f),
        o(size_t(kTokensQ * kHeads * kDim)),
        lse(size_t(kTokensQ * kHeads)) {
    std::memset(o.data(), 0x5A, o.size() * sizeof(float));
    std::memset(lse.data(), 0x5A, lse.size() * sizeof(float));
  }
  bool canaryIntact() const {
    auto intact = [](const std::vector<float> &x) {
      const auto *b = reinterpret_cast<const uint8_t *>(x.data());
      return std::all_of(b, b + x.size() * sizeof(float), [](uint8_t u) { return u == 0x5A; });
    };
    return intact(o) && intact(lse);
  }
  flashAttnStatus_t run() {
    fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
    fa_test::SeqDesc seq;
    EXPECT_EQ(flashAttnSetSeqRagged(seq, 3, cuQ.data(), cuK.data(), maxQ, maxK), FLASHATTN_STATUS_SUCCESS);
    fa_test::TensorDesc qd, kd, vd, od, ld;
    const std::vector<int64_t> strides = {kHeads * kDim, kDim, 1};
    qd.set(FLASHATTN_DATA_FP32, {kTokensQ, kHeads, kDim}, strides);
    kd.set(FLASHATTN_DATA_FP32, {kTokensK, kHeads, kDim}, strides);
    vd.set(FLASHATTN_DATA_FP32, {kTokensK, kHeads, kDim}, strides);
    od.set(FLASHATTN_DATA_FP32, {kTokensQ, kHeads, kDim}, strides);
    ld.set(FLASHATTN_DATA_FP32, {kTokensQ, kHeads}, {kHeads, 1});
    return flashAttnForward(handle, nullptr, seq, qd, q.data(), kd, k.data(), vd, v.data(), od, o.data(), ld,
                            lse.data(), nullptr, 0);
  }
};

void expectRejected(RaggedCall &call, const std::string &mentions) {
  EXPECT_EQ(call.run(), FLASHATTN_STATUS_BAD_PARAM);
  const std::string message = fa_test::lastError();
  EXPECT_NE(message.find(mentions), std::string::npos) << "message: " << message;
  EXPECT_TRUE(call.canaryIntact()) << "a rejected call wrote its outputs";
}

}  // namespace

TEST(HostIndexChecks, ValidRaggedCallRuns) {
  RaggedCall call;
  EXPECT_EQ(call.run(), FLASHATTN_STATUS_SUCCESS) << fa_test::lastError();
  EXPECT_FALSE(call.canaryIntact());
  // Sequence 1 has no query tokens, sequence 2's rows see keys 9..11.
  EXPECT_NEAR(call.o[size_t(4 * RaggedCall::kHeads * RaggedCall::kDim)], 1.0f, 1e-6f);
}

TEST(HostIndexChecks, RaggedPrefixSumsAreChecked) {
  {
    RaggedCall c;
    c.cuQ[0] = 1;
    expectRejected(c, "cuSeqlensQ[0] = 1");
  }
  {
    RaggedCall c;
    c.cuK = {0, 5, 3, 12};
    expectRejected(c, "cuSeqlensK[2] = 3");
  }
  {
    RaggedCall c;
    c.cuQ[3] = 11;  // past the 10 tokens of Q
    c.maxQ = 8;
    expectRejected(c, "cuSeqlensQ[3] = 11");
  }
  {
    RaggedCall c;
    c.cuK = {0, 1, 2, 12};  // sequence 2 has 10 keys, maxSeqlenK is 5
    expectRejected(c, "maxSeqlenK");
  }
  {
    RaggedCall c;
    c.maxQ = 5;  // sequence 2 has 6 query tokens
    expectRejected(c, "maxSeqlenQ");
  }
}

TEST(HostIndexChecks, KvLengthsAndBlockTablesAreChecked) {
  auto decode = [](const std::vector<int32_t> &lengths, const std::vector<int32_t> &table, int64_t pageSize,
                   std::vector<float> &o) {
    const int64_t batch = 2, heads = 2, dim = 8, numPages = 4, maxPages = 2;
    std::vector<float> q(size_t(batch * heads * dim), 0.5f), k(size_t(numPages * pageSize * heads * dim), 0.25f),
        v(k.size(), 1.f);
    fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
    fa_test::SeqDesc seq;
    flashAttnSetSeqKvLengths(seq, batch, lengths.data());
    flashAttnSetSeqPaged(seq, batch, table.data(), maxPages);
    fa_test::TensorDesc qd, kd, vd, od;
    qd.set(FLASHATTN_DATA_FP32, {batch, heads, 1, dim}, {heads * dim, dim, dim, 1});
    od.set(FLASHATTN_DATA_FP32, {batch, heads, 1, dim}, {heads * dim, dim, dim, 1});
    kd.set(FLASHATTN_DATA_FP32, {numPages, pageSize, heads, dim}, {pageSize * heads * dim, heads * dim, dim, 1});
    vd.set(FLASHATTN_DATA_FP32, {numPages, pageSize, heads, dim}, {pageSize * heads * dim, heads * dim, dim, 1});
    size_t bytes = 0;
    EXPECT_EQ(flashAttnDecodeChunkGetWorkspaceSize(handle, nullptr, seq, qd, kd, vd, od, nullptr, 0, &bytes),
              FLASHATTN_STATUS_SUCCESS);
    Workspace ws(bytes);
    return flashAttnDecodeChunk(handle, nullptr, seq, qd, q.data(), kd, k.data(), vd, v.data(), od, o.data(), nullptr,
                                nullptr, 0, ws.data(), ws.size());
  };
  std::vector<float> o(2 * 2 * 8);
  // Valid: sequence 1 uses no page, so its table row may hold anything.
  EXPECT_EQ(decode({16, 0}, {2, 0, -7, 99}, 8, o), FLASHATTN_STATUS_SUCCESS) << fa_test::lastError();
  const std::vector<float> canary(o.size(), 42.f);
  struct Bad {
    std::vector<int32_t> lengths, table;
    const char *mentions;
  } bad[] = {
      {{16, 9}, {2, 0, -7, 99}, "blockTable[1][0] = -7"},
      {{16, 9}, {2, 0, 3, 4}, "blockTable[1][1] = 4"},
      {{17, 1}, {2, 0, 1, 3}, "seqlensK[0] = 17"},
      {{16, -1}, {2, 0, 1, 3}, "seqlensK[1] = -1"},
  };
  for (const Bad &b : bad) {
    std::copy(canary.begin(), canary.end(), o.begin());  // same size; plain assignment trips a GCC 12 false warning
    EXPECT_EQ(decode(b.lengths, b.table, 8, o), FLASHATTN_STATUS_BAD_PARAM) << b.mentions;
    const std::string message = fa_test::lastError();
    EXPECT_NE(message.find(b.mentions), std::string::npos) << "message: " << message;
    EXPECT_EQ(o, canary) << "a rejected decode wrote O";
  }
}

TEST(HostSupport, CheckSupportDescribesTheReferenceBackend) {
  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  flashAttnBackend_t backend = FLASHATTN_BACKEND_AUTO;
  ASSERT_EQ(flashAttnGetBackend(handle, &backend), FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(backend, FLASHATTN_BACKEND_HOST);
  // An odd headDim, headDim != headDimV and GQA: nothing the API describes is NOT_SUPPORTED on the host.
  fa_test::TensorDesc qd, kd, vd, od, po, oo;
  qd.set(FLASHATTN_DATA_BF16, {2, 6, 16, 59}, {6 * 16 * 59, 16 * 59, 59, 1});
  kd.set(FLASHATTN_DATA_BF16, {2, 2, 100, 59}, {2 * 100 * 59, 100 * 59, 59, 1});
  vd.set(FLASHATTN_DATA_BF16, {2, 2, 100, 111}, {2 * 100 * 111, 100 * 111, 111, 1});
  od.set(FLASHATTN_DATA_BF16, {2, 6, 16, 111}, {6 * 16 * 111, 16 * 111, 111, 1});
  po.set(FLASHATTN_DATA_FP32, {3, 2, 6, 16, 111}, {2 * 6 * 16 * 111, 6 * 16 * 111, 16 * 111, 111, 1});
  oo.set(FLASHATTN_DATA_FP16, {2, 6, 16, 111}, {6 * 16 * 111, 16 * 111, 111, 1});
  for (flashAttnOperation_t op :
       {FLASHATTN_OP_FORWARD, FLASHATTN_OP_BACKWARD, FLASHATTN_OP_DECODE_CHUNK, FLASHATTN_OP_MERGE_STATES}) {
    char text[256] = {};
    int32_t deterministic = -1;
    const bool merge = op == FLASHATTN_OP_MERGE_STATES;
    ASSERT_EQ(flashAttnCheckSupport(handle, op, nullptr, nullptr, merge ? po : qd, merge ? nullptr : kd.d,
                                    merge ? nullptr : vd.d, merge ? oo : od, text, sizeof text, &deterministic),
              FLASHATTN_STATUS_SUCCESS)
        << "op " << op << ": " << fa_test::lastError();
    EXPECT_EQ(deterministic, 1) << text;
    EXPECT_EQ(std::string(text).rfind("host.reference", 0), 0u) << text;
  }
}

TEST(HostSupport, DecodeWorkspaceMatchesChunks) {
  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  fa_test::TensorDesc qd, kd, vd, od;
  qd.set(FLASHATTN_DATA_FP16, {3, 4, 2, 64}, {4 * 2 * 64, 2 * 64, 64, 1});
  od.set(FLASHATTN_DATA_FP16, {3, 4, 2, 64}, {4 * 2 * 64, 2 * 64, 64, 1});
  kd.set(FLASHATTN_DATA_FP16, {3, 1, 5000, 64}, {5000 * 64, 5000 * 64, 64, 1});
  vd.set(FLASHATTN_DATA_FP16, {3, 1, 5000, 64}, {5000 * 64, 5000 * 64, 64, 1});
  size_t one = 0, five = 0, automatic = 0;
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(handle, nullptr, nullptr, qd, kd, vd, od, nullptr, 1, &one),
            FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(handle, nullptr, nullptr, qd, kd, vd, od, nullptr, 5, &five),
            FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(handle, nullptr, nullptr, qd, kd, vd, od, nullptr, 0, &automatic),
            FLASHATTN_STATUS_SUCCESS);
  // Per chunk group (one per chunk up to 64) and each of the 3 * 4 * 2 rows: unnormalized O, maximum and sum in
  // double, each part 256-byte aligned.
  const size_t rows = 3 * 4 * 2;
  const auto expected = [&](size_t groups) { return alignUp(groups * rows * 64 * 8) + 2 * alignUp(groups * rows * 8); };
  EXPECT_EQ(one, expected(1));
  EXPECT_EQ(five, expected(5));
  EXPECT_EQ(automatic, expected(2));  // ceil(5000 / 4096) chunks
  size_t many = 0;
  ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(handle, nullptr, nullptr, qd, kd, vd, od, nullptr, 1 << 30, &many),
            FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(many, expected(64)) << "any chunk count folds into at most 64 groups";
  // Past 16 query tokens DecodeChunk runs as the forward, which needs no workspace, whatever the chunk count.
  fa_test::TensorDesc q64, o64;
  q64.set(FLASHATTN_DATA_FP16, {1, 4, 64, 64}, {4 * 64 * 64, 64 * 64, 64, 1});
  o64.set(FLASHATTN_DATA_FP16, {1, 4, 64, 64}, {4 * 64 * 64, 64 * 64, 64, 1});
  fa_test::TensorDesc k1, v1;
  k1.set(FLASHATTN_DATA_FP16, {1, 1, 800, 64}, {800 * 64, 800 * 64, 64, 1});
  v1.set(FLASHATTN_DATA_FP16, {1, 1, 800, 64}, {800 * 64, 800 * 64, 64, 1});
  for (int32_t chunks : {0, 1, 7}) {
    size_t bytes = 1;
    EXPECT_EQ(flashAttnDecodeChunkGetWorkspaceSize(handle, nullptr, nullptr, q64, k1, v1, o64, nullptr, chunks, &bytes),
              FLASHATTN_STATUS_SUCCESS)
        << fa_test::lastError();
    EXPECT_EQ(bytes, 0u) << chunks << " chunks";
  }
  char text[256] = {};
  ASSERT_EQ(flashAttnCheckSupport(handle, FLASHATTN_OP_DECODE_CHUNK, nullptr, nullptr, q64, k1, v1, o64, text,
                                  sizeof text, nullptr),
            FLASHATTN_STATUS_SUCCESS);
  EXPECT_NE(std::string(text).find("as the forward"), std::string::npos) << text;
}

TEST(HostGrid, CaseCount) {
  const size_t forward = shapeMaskCases().size() + shapeTypeCases().size() + headDimCases().size() +
                         featureCases().size() + raggedCases().size() + pagedCases().size() +
                         chunkedPrefillCases().size() + largeCases().size();
  const size_t backward = backwardCases().size();
  size_t decodeRuns = 0;
  for (const DecodeCase &c : decodeCases())
    decodeRuns += c.pageSizes.size() * (c.chunksPerCache > 0 ? size_t(c.chunksPerCache) : c.chunks.size());
  const size_t merge = mergeCases().size();
  const size_t finiteDifference = 5;
  std::printf(
      "[grid] HOST grid: %zu forward cases, %zu forward+backward cases, %zu finite-difference cases, %zu "
      "decode runs, %zu merge cases: %zu in all\n",
      forward, backward, finiteDifference, decodeRuns, merge,
      forward + backward + finiteDifference + decodeRuns + merge);
  EXPECT_GT(forward, 300u);
  EXPECT_GT(decodeRuns, 200u);
}
