// SPDX-License-Identifier: BSD-3-Clause
// Every class of bad input the library must refuse (docs/testing.md), through the public API. Each
// case checks four things:
//   - the status (one expected value, or the two a case may legitimately get where the contract allows both),
//   - a fresh last-error message (not the sentinel provoked just before) that names the argument,
//   - every buffer the call could reach is bitwise what it was (outputs hold a canary pattern), and any output
//     argument of the call itself (workspace size, description, handle) is untouched,
//   - the caller's CUDA error state is clean afterwards.
// A valid call of every operation (the baseline tests) shows that each case fails because of its one bad argument.
// On CUDA those valid calls are FP16 of head dim 64: a build without such instances (FLASHATTN_DTYPES,
// FLASHATTN_HEAD_DIMS; tests/common/built_instances.hpp) skips every case there.
// FLASHATTN_BAD_INPUT_VERBOSE=1 in the environment prints every case with its status and message.
//
// Destroyed handles and descriptors: the library keeps a registry of live objects and never dereferences a pointer
// before looking it up (src/core/descriptors.hpp), so passing a destroyed object is defined behaviour here and safe
// under ASan. The cases destroy an object and pass it before any new object of that kind is created, so the address
// cannot have been reused.
#include "bad_input_catalogue.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "built_instances.hpp"
#include "core/half.hpp"
#include "raw_enum_calls.h"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

namespace fa_bad {

namespace {

Target g_target{FLASHATTN_BACKEND_HOST, "HOST", nullptr};
int g_totalCases = 0;
std::map<std::string, int> g_casesPerTest;

using Dims = std::vector<int64_t>;
using Statuses = std::vector<flashAttnStatus_t>;
using Keywords = std::vector<std::string>;

constexpr flashAttnStatus_t kSuccess = FLASHATTN_STATUS_SUCCESS;
constexpr flashAttnStatus_t kNotInitialized = FLASHATTN_STATUS_NOT_INITIALIZED;
constexpr flashAttnStatus_t kBadParam = FLASHATTN_STATUS_BAD_PARAM;
constexpr flashAttnStatus_t kNotSupported = FLASHATTN_STATUS_NOT_SUPPORTED;
constexpr flashAttnStatus_t kInsufficientWorkspace = FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE;
constexpr flashAttnDataType_t kFp16 = FLASHATTN_DATA_FP16;
constexpr flashAttnDataType_t kBf16 = FLASHATTN_DATA_BF16;
constexpr flashAttnDataType_t kFp32 = FLASHATTN_DATA_FP32;

// Written into every output before a case; read back bitwise after it.
constexpr uint8_t kCanary = 0xA5;
// Extra bytes after every buffer, so that pointers the cases shift (misaligned, partly overlapping) stay inside the
// allocation even if the library wrongly accepted them; the canary covers the slack too.
constexpr std::size_t kSlack = 256;
// A value no case uses: the sentinel failure's message contains it, so a message still containing it is stale.
constexpr int64_t kSentinelWindow = -987654321;
constexpr std::size_t kBytesCanary = 0x5A5A5A5Au;

Dims packed(const Dims &dims) {
  Dims strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

std::size_t spanBytes(flashAttnDataType_t t, const Dims &dims, const Dims &strides) {
  int64_t last = 0;
  for (size_t i = 0; i < dims.size(); ++i) last += (dims[i] - 1) * strides[i];
  return std::size_t(last + 1) * fa_test::elementSize(t);
}

std::string statusName(flashAttnStatus_t s) { return flashAttnGetErrorString(s); }

// Shortest text that tells the value apart ("-1e-30", "-0", "nan"), unlike std::to_string's fixed six decimals.
std::string floatText(float value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string statusList(const Statuses &statuses) {
  std::string out;
  for (flashAttnStatus_t s : statuses) out += (out.empty() ? "" : " or ") + statusName(s);
  return out;
}

// The message without the "flashAttnFoo: " prefix the C layer adds, so a keyword such as "workspace" or "scale" is not
// found in the function name instead of in the explanation.
std::string messageBody(const std::string &message) {
  if (message.rfind("flashAttn", 0) == 0) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) return message.substr(colon + 2);
  }
  return message;
}

bool isWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Short keywords are argument names such as "K" or "dO": they must stand as a word, with their case. Longer ones are
// matched anywhere, ignoring case ("stride" in "strides[3]", "workspace" in "workspaceBytes").
bool mentions(const std::string &text, const std::string &keyword) {
  if (keyword.size() <= 3) {
    for (size_t at = text.find(keyword); at != std::string::npos; at = text.find(keyword, at + 1)) {
      const bool startOk = at == 0 || !isWordChar(text[at - 1]);
      const bool endOk = at + keyword.size() == text.size() || !isWordChar(text[at + keyword.size()]);
      if (startOk && endOk) return true;
    }
    return false;
  }
  std::string lowerText(text), lowerKeyword(keyword);
  std::transform(lowerText.begin(), lowerText.end(), lowerText.begin(), [](unsigned char c) { return std::tolower(c); });
  std::transform(lowerKeyword.begin(), lowerKeyword.end(), lowerKeyword.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return lowerText.find(lowerKeyword) != std::string::npos;
}

std::string keywordList(const Keywords &keywords) {
  std::string out;
  for (const std::string &k : keywords) out += (out.empty() ? "\"" : " or \"") + k + "\"";
  return out;
}

// A buffer in the target's memory with kSlack spare bytes; `output` buffers are refilled with the canary before
// every case, inputs keep their values. Both are compared bitwise after every case.
class Buffer {
 public:
  Buffer(Memory &memory, std::string name, std::size_t bytes, bool output)
      : memory_(memory), name_(std::move(name)), bytes_(bytes + kSlack), output_(output) {
    ptr_ = static_cast<uint8_t *>(memory_.allocate(bytes_));
    memory_.fill(ptr_, kCanary, bytes_);
  }
  ~Buffer() { memory_.release(ptr_); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

  uint8_t *data(std::size_t byteOffset = 0) const { return ptr_ + byteOffset; }
  template <typename T>
  T *as(std::size_t byteOffset = 0) const {
    return reinterpret_cast<T *>(ptr_ + byteOffset);
  }
  const std::string &name() const { return name_; }
  std::size_t bytes() const { return bytes_; }
  bool output() const { return output_; }
  void upload(const void *src, std::size_t n) { memory_.upload(ptr_, src, n); }
  void arm() {
    if (output_) memory_.fill(ptr_, kCanary, bytes_);
  }
  std::vector<uint8_t> snapshot() const {
    std::vector<uint8_t> out(bytes_);
    memory_.download(out.data(), ptr_, bytes_);
    return out;
  }

 private:
  Memory &memory_;
  std::string name_;
  std::size_t bytes_;
  bool output_;
  uint8_t *ptr_ = nullptr;
};

using Desc = std::unique_ptr<fa_test::TensorDesc>;

Desc makeDesc(flashAttnDataType_t t, const Dims &dims, Dims strides = {}) {
  if (strides.empty()) strides = packed(dims);
  auto d = std::make_unique<fa_test::TensorDesc>();
  const flashAttnStatus_t s = d->set(t, dims, strides);
  if (s != kSuccess) throw std::runtime_error("test setup: descriptor rejected: " + fa_test::lastError());
  return d;
}

// One call of each operation with every argument spelled out, so a case changes exactly one of them. size() and
// support() are the workspace-size twin and CheckSupport with the same descriptors.
struct ForwardCall {
  flashAttnHandle_t handle;
  flashAttnAttentionDescriptor_t attn;
  flashAttnSeqDescriptor_t seq;
  flashAttnTensorDescriptor_t qDesc;
  const void *q;
  flashAttnTensorDescriptor_t kDesc;
  const void *k;
  flashAttnTensorDescriptor_t vDesc;
  const void *v;
  flashAttnTensorDescriptor_t oDesc;
  void *o;
  flashAttnTensorDescriptor_t lseDesc;
  float *lse;
  void *workspace;
  std::size_t workspaceBytes;

  flashAttnStatus_t run() const {
    return flashAttnForward(handle, attn, seq, qDesc, q, kDesc, k, vDesc, v, oDesc, o, lseDesc, lse, workspace,
                            workspaceBytes);
  }
  flashAttnStatus_t size(std::size_t *bytes) const {
    return flashAttnForwardGetWorkspaceSize(handle, attn, seq, qDesc, kDesc, vDesc, oDesc, lseDesc, bytes);
  }
  flashAttnStatus_t support(char *text, std::size_t len, int32_t *deterministic) const {
    return flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, attn, seq, qDesc, kDesc, vDesc, oDesc, text, len,
                                 deterministic);
  }
};

struct BackwardCall {
  flashAttnHandle_t handle;
  flashAttnAttentionDescriptor_t attn;
  flashAttnSeqDescriptor_t seq;
  flashAttnTensorDescriptor_t qDesc;
  const void *q;
  flashAttnTensorDescriptor_t kDesc;
  const void *k;
  flashAttnTensorDescriptor_t vDesc;
  const void *v;
  flashAttnTensorDescriptor_t oDesc;
  const void *o;
  flashAttnTensorDescriptor_t dODesc;
  const void *dO;
  flashAttnTensorDescriptor_t lseDesc;
  const float *lse;
  flashAttnTensorDescriptor_t dQDesc;
  void *dQ;
  flashAttnTensorDescriptor_t dKDesc;
  void *dK;
  flashAttnTensorDescriptor_t dVDesc;
  void *dV;
  void *workspace;
  std::size_t workspaceBytes;

  flashAttnStatus_t run() const {
    return flashAttnBackward(handle, attn, seq, qDesc, q, kDesc, k, vDesc, v, oDesc, o, dODesc, dO, lseDesc, lse,
                             dQDesc, dQ, dKDesc, dK, dVDesc, dV, workspace, workspaceBytes);
  }
  flashAttnStatus_t size(std::size_t *bytes) const {
    return flashAttnBackwardGetWorkspaceSize(handle, attn, seq, qDesc, kDesc, vDesc, oDesc, lseDesc, bytes);
  }
  flashAttnStatus_t support(char *text, std::size_t len, int32_t *deterministic) const {
    return flashAttnCheckSupport(handle, FLASHATTN_OP_BACKWARD, attn, seq, qDesc, kDesc, vDesc, oDesc, text, len,
                                 deterministic);
  }
};

struct DecodeCall {
  flashAttnHandle_t handle;
  flashAttnAttentionDescriptor_t attn;
  flashAttnSeqDescriptor_t seq;
  flashAttnTensorDescriptor_t qDesc;
  const void *q;
  flashAttnTensorDescriptor_t kDesc;
  const void *k;
  flashAttnTensorDescriptor_t vDesc;
  const void *v;
  flashAttnTensorDescriptor_t oDesc;
  void *o;
  flashAttnTensorDescriptor_t lseDesc;
  float *lse;
  int32_t numChunks;
  void *workspace;
  std::size_t workspaceBytes;

  flashAttnStatus_t run() const {
    return flashAttnDecodeChunk(handle, attn, seq, qDesc, q, kDesc, k, vDesc, v, oDesc, o, lseDesc, lse, numChunks,
                                workspace, workspaceBytes);
  }
  flashAttnStatus_t size(std::size_t *bytes) const {
    return flashAttnDecodeChunkGetWorkspaceSize(handle, attn, seq, qDesc, kDesc, vDesc, oDesc, lseDesc, numChunks,
                                                bytes);
  }
  flashAttnStatus_t support(char *text, std::size_t len, int32_t *deterministic) const {
    return flashAttnCheckSupport(handle, FLASHATTN_OP_DECODE_CHUNK, attn, seq, qDesc, kDesc, vDesc, oDesc, text, len,
                                 deterministic);
  }
};

struct MergeCall {
  flashAttnHandle_t handle;
  flashAttnTensorDescriptor_t partialODesc;
  const float *partialO;
  flashAttnTensorDescriptor_t partialLseDesc;
  const float *partialLse;
  flashAttnTensorDescriptor_t oDesc;
  void *o;
  flashAttnTensorDescriptor_t lseDesc;
  float *lse;
  void *workspace;
  std::size_t workspaceBytes;

  flashAttnStatus_t run() const {
    return flashAttnMergeStates(handle, partialODesc, partialO, partialLseDesc, partialLse, oDesc, o, lseDesc, lse,
                                workspace, workspaceBytes);
  }
  flashAttnStatus_t size(std::size_t *bytes) const {
    return flashAttnMergeStatesGetWorkspaceSize(handle, partialODesc, partialLseDesc, oDesc, lseDesc, bytes);
  }
  // CheckSupport takes the partial O as qDesc and O as oDesc for a merge; it sees no LSE descriptor.
  flashAttnStatus_t support(char *text, std::size_t len, int32_t *deterministic) const {
    return flashAttnCheckSupport(handle, FLASHATTN_OP_MERGE_STATES, nullptr, nullptr, partialODesc, nullptr, nullptr,
                                 oDesc, text, len, deterministic);
  }
};

// Which entry points a descriptor-level case goes through: the operation, its workspace-size twin, CheckSupport.
enum Entry : unsigned { kOp = 1u, kSize = 2u, kSupport = 4u, kOpAndSize = kOp | kSize, kAllEntries = 7u };

// Shapes of the valid problems every case starts from.
constexpr int64_t B = 2, H = 4, KVH = 2, SQ = 8, SK = 16, D = 64;
constexpr int64_t DEC_SQ = 2, CACHE = 32, PAGE = 8, NUM_PAGES = 8, PAGES_PER_SEQ = 4;
constexpr int64_t STATES = 3;
constexpr int64_t RAG_TQ = 8, RAG_TK = 16;

class BadInput : public ::testing::Test {
 protected:
  Memory &memory() { return *g_target.memory; }
  bool onHost() const { return g_target.backend == FLASHATTN_BACKEND_HOST; }
  bool onCuda() const { return g_target.backend == FLASHATTN_BACKEND_CUDA; }

  void SetUp() override {
    ASSERT_NE(g_target.memory, nullptr) << "main() did not call fa_bad::setTarget";
    const flashAttnStatus_t s = flashAttnCreateWithBackend(&handle_, g_target.backend);
    if (s != kSuccess) {
      handle_ = nullptr;
      GTEST_SKIP() << "no " << g_target.name << " handle on this machine: " << statusName(s) << ": "
                   << fa_test::lastError();
    }
    casesAtStart_ = g_totalCases;
    // Every case starts from valid FP16 problems of head dim D, which on CUDA need those instances in this build.
    if (onCuda()) {
      for (const fa_test::Family f : {fa_test::Family::Forward, fa_test::Family::Backward, fa_test::Family::Decode}) {
        SKIP_UNLESS_BUILT_AT_LEAST(f, kFp16, D);
      }
    }
    ASSERT_EQ(flashAttnSetAttentionWindow(sentinel_, kSentinelWindow, 0), kBadParam);
    buildDense();
    buildDecode();
    buildRagged();
    buildMerge();
    buildWorkspace();
  }

  void TearDown() override {
    const ::testing::TestInfo *info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (handle_) g_casesPerTest[std::string(info->name())] += g_totalCases - casesAtStart_;
    buffers_.clear();
    if (handle_) flashAttnDestroy(handle_);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Buffers and problems

  Buffer &newBuffer(const std::string &name, std::size_t bytes, bool output) {
    buffers_.push_back(std::make_unique<Buffer>(memory(), name, bytes, output));
    return *buffers_.back();
  }

  // A tensor buffer holding random finite values of its type (inputs) or the canary (outputs).
  Buffer &tensorBuffer(const std::string &name, flashAttnDataType_t t, const Dims &dims, bool output) {
    const std::size_t bytes = spanBytes(t, dims, packed(dims));
    Buffer &b = newBuffer(name, bytes, output);
    if (!output) {
      std::vector<uint8_t> host(bytes);
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      for (std::size_t i = 0; i < bytes / fa_test::elementSize(t); ++i)
        fa_test::storeElement(host.data(), t, int64_t(i), dist(rng_));
      b.upload(host.data(), bytes);
    }
    return b;
  }

  Buffer &indexBuffer(const std::string &name, const std::vector<int32_t> &values) {
    Buffer &b = newBuffer(name, values.size() * sizeof(int32_t), false);
    b.upload(values.data(), values.size() * sizeof(int32_t));
    return b;
  }

  void buildDense() {
    qD_ = makeDesc(kFp16, {B, H, SQ, D});
    kD_ = makeDesc(kFp16, {B, KVH, SK, D});
    vD_ = makeDesc(kFp16, {B, KVH, SK, D});
    oD_ = makeDesc(kFp16, {B, H, SQ, D});
    lseD_ = makeDesc(kFp32, {B, H, SQ});
    q_ = &tensorBuffer("Q", kFp16, {B, H, SQ, D}, false);
    k_ = &tensorBuffer("K", kFp16, {B, KVH, SK, D}, false);
    v_ = &tensorBuffer("V", kFp16, {B, KVH, SK, D}, false);
    o_ = &tensorBuffer("O", kFp16, {B, H, SQ, D}, true);
    lse_ = &tensorBuffer("LSE", kFp32, {B, H, SQ}, true);
    // Backward inputs: O and LSE are read; plausible values keep the HOST baseline finite.
    oIn_ = &tensorBuffer("O (backward input)", kFp16, {B, H, SQ, D}, false);
    lseIn_ = &newBuffer("LSE (backward input)", std::size_t(B * H * SQ) * 4, false);
    const std::vector<float> ones(std::size_t(B * H * SQ), 1.0f);
    lseIn_->upload(ones.data(), ones.size() * 4);
    dO_ = &tensorBuffer("dO", kFp16, {B, H, SQ, D}, false);
    dQ_ = &tensorBuffer("dQ", kFp16, {B, H, SQ, D}, true);
    dK_ = &tensorBuffer("dK", kFp16, {B, KVH, SK, D}, true);
    dV_ = &tensorBuffer("dV", kFp16, {B, KVH, SK, D}, true);
  }

  void buildDecode() {
    qDecD_ = makeDesc(kFp16, {B, H, DEC_SQ, D});
    cacheD_ = makeDesc(kFp16, {B, KVH, CACHE, D});
    oDecD_ = makeDesc(kFp16, {B, H, DEC_SQ, D});
    lseDecD_ = makeDesc(kFp32, {B, H, DEC_SQ});
    qDec_ = &tensorBuffer("Q (decode)", kFp16, {B, H, DEC_SQ, D}, false);
    kCache_ = &tensorBuffer("K cache", kFp16, {B, KVH, CACHE, D}, false);
    vCache_ = &tensorBuffer("V cache", kFp16, {B, KVH, CACHE, D}, false);
    oDec_ = &tensorBuffer("O (decode)", kFp16, {B, H, DEC_SQ, D}, true);
    lseDec_ = &tensorBuffer("LSE (decode)", kFp32, {B, H, DEC_SQ}, true);
    kvLengths_ = &indexBuffer("seqlensK", {20, 32});
    ASSERT_EQ(flashAttnSetSeqKvLengths(decodeSeq_, B, kvLengths_->as<int32_t>()), kSuccess) << fa_test::lastError();

    pagesD_ = makeDesc(kFp16, {NUM_PAGES, PAGE, KVH, D});
    kPages_ = &tensorBuffer("K pages", kFp16, {NUM_PAGES, PAGE, KVH, D}, false);
    vPages_ = &tensorBuffer("V pages", kFp16, {NUM_PAGES, PAGE, KVH, D}, false);
    blockTable_ = &indexBuffer("blockTable", {6, 2, 7, 0, 3, 5, 1, 4});
    ASSERT_EQ(flashAttnSetSeqKvLengths(pagedSeq_, B, kvLengths_->as<int32_t>()), kSuccess) << fa_test::lastError();
    ASSERT_EQ(flashAttnSetSeqPaged(pagedSeq_, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess)
        << fa_test::lastError();
  }

  void buildRagged() {
    qRagD_ = makeDesc(kFp16, {RAG_TQ, H, D});
    kRagD_ = makeDesc(kFp16, {RAG_TK, KVH, D});
    oRagD_ = makeDesc(kFp16, {RAG_TQ, H, D});
    lseRagD_ = makeDesc(kFp32, {RAG_TQ, H});
    qRag_ = &tensorBuffer("Q (ragged)", kFp16, {RAG_TQ, H, D}, false);
    kRag_ = &tensorBuffer("K (ragged)", kFp16, {RAG_TK, KVH, D}, false);
    vRag_ = &tensorBuffer("V (ragged)", kFp16, {RAG_TK, KVH, D}, false);
    oRag_ = &tensorBuffer("O (ragged)", kFp16, {RAG_TQ, H, D}, true);
    lseRag_ = &tensorBuffer("LSE (ragged)", kFp32, {RAG_TQ, H}, true);
    cuQ_ = &indexBuffer("cuSeqlensQ", {0, 3, 8});
    cuK_ = &indexBuffer("cuSeqlensK", {0, 7, 16});
    ASSERT_EQ(flashAttnSetSeqRagged(raggedSeq_, B, cuQ_->as<int32_t>(), cuK_->as<int32_t>(), 5, 9), kSuccess)
        << fa_test::lastError();
    // Chunked prefill: the ragged Q's sequences over the paged cache, no cuSeqlensK.
    ASSERT_EQ(flashAttnSetSeqRagged(raggedPagedSeq_, B, cuQ_->as<int32_t>(), nullptr, 5, 9), kSuccess)
        << fa_test::lastError();
    ASSERT_EQ(flashAttnSetSeqKvLengths(raggedPagedSeq_, B, kvLengths_->as<int32_t>()), kSuccess);
    ASSERT_EQ(flashAttnSetSeqPaged(raggedPagedSeq_, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
  }

  void buildMerge() {
    partialOD_ = makeDesc(kFp32, {STATES, B, H, SQ, D});
    partialLseD_ = makeDesc(kFp32, {STATES, B, H, SQ});
    partialO_ = &tensorBuffer("partialO", kFp32, {STATES, B, H, SQ, D}, false);
    partialLse_ = &tensorBuffer("partialLse", kFp32, {STATES, B, H, SQ}, false);
    oMerge_ = &tensorBuffer("O (merge)", kFp16, {B, H, SQ, D}, true);
    lseMerge_ = &tensorBuffer("LSE (merge)", kFp32, {B, H, SQ}, true);
  }

  // One workspace for every call, as large as the largest size query of the valid calls (queries the backend cannot
  // serve yet are left out: their baseline test reports them).
  void buildWorkspace() {
    std::size_t most = 64 * 1024;
    std::size_t bytes = 0;
    if (forward().size(&bytes) == kSuccess) most = std::max(most, bytes);
    if (backward().size(&bytes) == kSuccess) most = std::max(most, bytes);
    if (decode().size(&bytes) == kSuccess) most = std::max(most, bytes);
    if (paged().size(&bytes) == kSuccess) most = std::max(most, bytes);
    if (merge().size(&bytes) == kSuccess) most = std::max(most, bytes);
    workspace_ = &newBuffer("workspace", most, true);
    workspaceBytes_ = most;
  }

  ForwardCall forward() const {
    return ForwardCall{handle_, attn_,     nullptr,   *qD_,    q_->data(),        *kD_,         k_->data(),
                       *vD_,    v_->data(), *oD_,     o_->data(), *lseD_, lse_->as<float>(), workspacePtr(),
                       workspaceBytes_};
  }
  ForwardCall raggedForward() const {
    return ForwardCall{handle_,  attn_,         raggedSeq_, *qRagD_,  qRag_->data(),        *kRagD_,
                       kRag_->data(), *kRagD_,  vRag_->data(), *oRagD_, oRag_->data(), *lseRagD_,
                       lseRag_->as<float>(), workspacePtr(), workspaceBytes_};
  }
  // The dense Q of forward() over the paged cache of paged().
  ForwardCall pagedForward() const {
    ForwardCall c = forward();
    c.seq = pagedSeq_;
    c.kDesc = c.vDesc = *pagesD_;
    c.k = kPages_->data();
    c.v = vPages_->data();
    return c;
  }
  // The ragged Q of raggedForward() over the same paged cache (chunked prefill).
  ForwardCall raggedPagedForward() const {
    ForwardCall c = raggedForward();
    c.seq = raggedPagedSeq_;
    c.kDesc = c.vDesc = *pagesD_;
    c.k = kPages_->data();
    c.v = vPages_->data();
    return c;
  }
  BackwardCall backward() const {
    return BackwardCall{handle_,     attn_,         nullptr,         *qD_,         q_->data(),
                        *kD_,        k_->data(),    *vD_,            v_->data(),   *oD_,
                        oIn_->data(), *qD_,         dO_->data(),     *lseD_,       lseIn_->as<float>(),
                        *qD_,        dQ_->data(),   *kD_,            dK_->data(),  *vD_,
                        dV_->data(), workspacePtr(), workspaceBytes_};
  }
  DecodeCall decode() const {
    return DecodeCall{handle_,          attn_,          decodeSeq_,      *qDecD_,       qDec_->data(),
                      *cacheD_,         kCache_->data(), *cacheD_,       vCache_->data(), *oDecD_,
                      oDec_->data(),    *lseDecD_,      lseDec_->as<float>(), 2,        workspacePtr(),
                      workspaceBytes_};
  }
  DecodeCall paged() const {
    DecodeCall c = decode();
    c.seq = pagedSeq_;
    c.kDesc = c.vDesc = *pagesD_;
    c.k = kPages_->data();
    c.v = vPages_->data();
    return c;
  }
  MergeCall merge() const {
    return MergeCall{handle_,       *partialOD_,   partialO_->as<float>(), *partialLseD_, partialLse_->as<float>(),
                     *oD_,          oMerge_->data(), *lseD_,              lseMerge_->as<float>(), workspacePtr(),
                     workspaceBytes_};
  }
  void *workspacePtr() const { return workspace_ ? workspace_->data() : nullptr; }

  // ---------------------------------------------------------------------------------------------------------------
  // The case runner

  // What one call did: its status, the last-error message after it, whether that message is still the sentinel's,
  // the buffers whose bytes changed, and whether it left a CUDA error behind.
  struct Outcome {
    flashAttnStatus_t status = kSuccess;
    std::string message;
    bool staleMessage = false;
    std::vector<std::string> changedBuffers;
    bool errorStateClean = true;
  };

  Outcome observe(const std::function<flashAttnStatus_t()> &call) {
    Outcome out;
    for (auto &b : buffers_) b->arm();
    std::vector<std::vector<uint8_t>> before;
    before.reserve(buffers_.size());
    for (auto &b : buffers_) before.push_back(b->snapshot());
    if (flashAttnSetAttentionWindow(sentinel_, kSentinelWindow, 0) != kBadParam)
      throw std::runtime_error("the sentinel failure did not fail");
    memory().clearCallerErrorState();

    out.status = call();

    out.message = fa_test::lastError();
    out.staleMessage = out.message.find(std::to_string(kSentinelWindow)) != std::string::npos;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const std::vector<uint8_t> after = buffers_[i]->snapshot();
      if (after == before[i]) continue;
      size_t at = 0;
      while (after[at] == before[i][at]) ++at;
      out.changedBuffers.push_back(buffers_[i]->name() + " (first changed byte " + std::to_string(at) + " of " +
                                   std::to_string(after.size()) + ")");
    }
    out.errorStateClean = memory().callerErrorStateClean();
    return out;
  }

  void expectRejected(const std::string &name, const Statuses &allowed, const Keywords &keywords,
                      const std::function<flashAttnStatus_t()> &call) {
    const Outcome out = observe(call);
    static const bool verbose = std::getenv("FLASHATTN_BAD_INPUT_VERBOSE") != nullptr;
    if (verbose) std::printf("[case] %s -> %s: %s\n", name.c_str(), statusName(out.status).c_str(), out.message.c_str());
    const bool expectedStatus = std::find(allowed.begin(), allowed.end(), out.status) != allowed.end();
    EXPECT_TRUE(expectedStatus) << name << ": got " << statusName(out.status) << ", expected "
                                << statusList(allowed) << "; message: " << out.message;
    if (out.status != kSuccess) {
      const std::string body = messageBody(out.message);
      EXPECT_FALSE(out.staleMessage) << name << ": the call failed without setting a message";
      EXPECT_FALSE(body.empty()) << name << ": empty message";
      bool named = false;
      for (const std::string &k : keywords) named = named || mentions(body, k);
      EXPECT_TRUE(named) << name << ": message \"" << out.message << "\" names none of " << keywordList(keywords);
    }
    for (const std::string &changed : out.changedBuffers) ADD_FAILURE() << name << ": buffer " << changed;
    EXPECT_TRUE(out.errorStateClean) << name << ": the failed call left a CUDA error behind";
    ++g_totalCases;
  }

  // A descriptor-level case goes through the operation, its size twin and CheckSupport; the size query must leave
  // `bytes` alone and CheckSupport its description and flag.
  template <typename Call>
  void rejectEverywhere(const std::string &name, const Statuses &allowed, const Keywords &keywords, const Call &call,
                        unsigned entries = kAllEntries) {
    if (entries & kOp) expectRejected(name, allowed, keywords, [&] { return call.run(); });
    if (entries & kSize) {
      std::size_t bytes = kBytesCanary;
      expectRejected(name + " (size query)", allowed, keywords, [&] { return call.size(&bytes); });
      EXPECT_EQ(bytes, kBytesCanary) << name << " (size query) wrote *bytes on failure";
    }
    if (entries & kSupport) {
      char text[64];
      std::memset(text, 0x5A, sizeof text);
      int32_t deterministic = 0x5A5A;
      expectRejected(name + " (CheckSupport)", allowed, keywords,
                     [&] { return call.support(text, sizeof text, &deterministic); });
      EXPECT_TRUE(std::all_of(text, text + sizeof text, [](char c) { return c == 0x5A; }))
          << name << " (CheckSupport) wrote the description on failure";
      EXPECT_EQ(deterministic, 0x5A5A) << name << " (CheckSupport) wrote deterministic on failure";
    }
  }

  // A tensor descriptor setter case: the descriptor must read back exactly as before.
  void expectSetRejected(const std::string &name, const Keywords &keywords, int32_t dataType, int32_t rank,
                         const int64_t *dims, const int64_t *strides) {
    fa_test::TensorDesc desc;
    ASSERT_EQ(desc.set(kFp16, {B, H, SQ, D}, packed({B, H, SQ, D})), kSuccess);
    expectRejected(name, {kBadParam}, keywords,
                   [&] { return rawSetTensorDescriptor(desc, dataType, rank, dims, strides); });
    flashAttnDataType_t gotType = kFp32;
    int32_t gotRank = 0;
    int64_t gotDims[4] = {}, gotStrides[4] = {};
    ASSERT_EQ(flashAttnGetTensorDescriptor(desc, 4, &gotType, &gotRank, gotDims, gotStrides), kSuccess);
    EXPECT_EQ(gotType, kFp16) << name << " changed the descriptor";
    EXPECT_EQ(gotRank, 4) << name << " changed the descriptor";
    EXPECT_EQ(Dims(gotDims, gotDims + 4), Dims({B, H, SQ, D})) << name << " changed the descriptor";
    EXPECT_EQ(Dims(gotStrides, gotStrides + 4), packed({B, H, SQ, D})) << name << " changed the descriptor";
  }

  flashAttnHandle_t handle_ = nullptr;
  fa_test::AttnDesc attn_;      // defaults, valid for every call
  fa_test::AttnDesc sentinel_;  // provokes the sentinel message
  fa_test::SeqDesc decodeSeq_, pagedSeq_, raggedSeq_, raggedPagedSeq_;
  Desc qD_, kD_, vD_, oD_, lseD_;
  Desc qDecD_, cacheD_, oDecD_, lseDecD_, pagesD_;
  Desc qRagD_, kRagD_, oRagD_, lseRagD_;
  Desc partialOD_, partialLseD_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Buffer *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *o_ = nullptr, *lse_ = nullptr;
  Buffer *oIn_ = nullptr, *lseIn_ = nullptr, *dO_ = nullptr, *dQ_ = nullptr, *dK_ = nullptr, *dV_ = nullptr;
  Buffer *qDec_ = nullptr, *kCache_ = nullptr, *vCache_ = nullptr, *oDec_ = nullptr, *lseDec_ = nullptr;
  Buffer *kvLengths_ = nullptr, *kPages_ = nullptr, *vPages_ = nullptr, *blockTable_ = nullptr;
  Buffer *qRag_ = nullptr, *kRag_ = nullptr, *vRag_ = nullptr, *oRag_ = nullptr, *lseRag_ = nullptr;
  Buffer *cuQ_ = nullptr, *cuK_ = nullptr;
  Buffer *partialO_ = nullptr, *partialLse_ = nullptr, *oMerge_ = nullptr, *lseMerge_ = nullptr;
  Buffer *workspace_ = nullptr;
  std::size_t workspaceBytes_ = 0;
  std::mt19937 rng_{12345};

 private:
  int casesAtStart_ = 0;
};

// ---------------------------------------------------------------------------------------------------------------------
// Baselines: the valid calls every case starts from succeed, so each case fails for its one bad argument only.

TEST_F(BadInput, BaselineCallsSucceed) {
  std::size_t bytes = 0;
  EXPECT_EQ(forward().run(), kSuccess) << "forward: " << fa_test::lastError();
  EXPECT_EQ(forward().size(&bytes), kSuccess) << "forward size: " << fa_test::lastError();
  EXPECT_EQ(raggedForward().run(), kSuccess) << "ragged forward: " << fa_test::lastError();
  EXPECT_EQ(pagedForward().run(), kSuccess) << "paged forward: " << fa_test::lastError();
  EXPECT_EQ(raggedPagedForward().run(), kSuccess) << "ragged paged forward: " << fa_test::lastError();
  EXPECT_EQ(pagedForward().support(nullptr, 0, nullptr), kSuccess) << "CheckSupport paged: " << fa_test::lastError();
  EXPECT_EQ(raggedPagedForward().support(nullptr, 0, nullptr), kSuccess)
      << "CheckSupport ragged paged: " << fa_test::lastError();
  EXPECT_EQ(backward().run(), kSuccess) << "backward: " << fa_test::lastError();
  EXPECT_EQ(decode().run(), kSuccess) << "decode: " << fa_test::lastError();
  EXPECT_EQ(paged().run(), kSuccess) << "paged decode: " << fa_test::lastError();
  EXPECT_EQ(merge().run(), kSuccess) << "merge: " << fa_test::lastError();
  EXPECT_EQ(forward().support(nullptr, 0, nullptr), kSuccess) << "CheckSupport forward: " << fa_test::lastError();
  EXPECT_EQ(backward().support(nullptr, 0, nullptr), kSuccess) << "CheckSupport backward: " << fa_test::lastError();
  EXPECT_EQ(decode().support(nullptr, 0, nullptr), kSuccess) << "CheckSupport decode: " << fa_test::lastError();
  EXPECT_EQ(merge().support(nullptr, 0, nullptr), kSuccess) << "CheckSupport merge: " << fa_test::lastError();
  EXPECT_TRUE(memory().callerErrorStateClean());
}

// The detectors themselves: a valid forward seen through the same machinery must show up as written outputs and as a
// call that set no new message, so a library that wrote outputs or stayed silent on failure could not pass a case.
TEST_F(BadInput, DetectorsSeeWritesAndStaleMessages) {
  const Outcome out = observe([&] { return forward().run(); });
  if (out.status != kSuccess) GTEST_SKIP() << "the valid forward does not run here: " << out.message;
  EXPECT_TRUE(out.staleMessage) << "a successful call must keep the previous message: " << out.message;
  const auto changed = [&](const std::string &name) {
    return std::any_of(out.changedBuffers.begin(), out.changedBuffers.end(),
                       [&](const std::string &c) { return c.rfind(name + " (", 0) == 0; });
  };
  EXPECT_TRUE(changed("O")) << "the canary did not see the forward write O";
  EXPECT_TRUE(changed("LSE")) << "the canary did not see the forward write LSE";
  EXPECT_FALSE(changed("Q")) << "the forward wrote its input Q";
  EXPECT_TRUE(out.errorStateClean);
  EXPECT_TRUE(mentions("K has 3 heads", "K") && !mentions("dK has 3 heads", "K") && mentions("bad Stride", "stride") &&
              !mentions("KV heads", "K"));
}

// ---------------------------------------------------------------------------------------------------------------------
// NULL, destroyed, unset and foreign handles and descriptors: NOT_INITIALIZED.

TEST_F(BadInput, NullHandle) {
  auto f = forward();
  f.handle = nullptr;
  rejectEverywhere("forward: handle NULL", {kNotInitialized}, {"handle"}, f);
  auto bw = backward();
  bw.handle = nullptr;
  rejectEverywhere("backward: handle NULL", {kNotInitialized}, {"handle"}, bw, kOpAndSize);
  auto d = decode();
  d.handle = nullptr;
  rejectEverywhere("decode: handle NULL", {kNotInitialized}, {"handle"}, d, kOpAndSize);
  auto m = merge();
  m.handle = nullptr;
  rejectEverywhere("merge: handle NULL", {kNotInitialized}, {"handle"}, m);

  flashAttnBackend_t backend = FLASHATTN_BACKEND_AUTO;
  expectRejected("GetBackend: handle NULL", {kNotInitialized}, {"handle"},
                 [&] { return flashAttnGetBackend(nullptr, &backend); });
  EXPECT_EQ(backend, FLASHATTN_BACKEND_AUTO);
  expectRejected("SetStream: handle NULL", {kNotInitialized}, {"handle"},
                 [&] { return flashAttnSetStream(nullptr, nullptr); });
  CUstream_st *stream = reinterpret_cast<CUstream_st *>(&backend);
  expectRejected("GetStream: handle NULL", {kNotInitialized}, {"handle"},
                 [&] { return flashAttnGetStream(nullptr, &stream); });
  EXPECT_EQ(stream, reinterpret_cast<CUstream_st *>(&backend));
}

TEST_F(BadInput, DestroyedAndForeignHandle) {
  flashAttnHandle_t dead = nullptr;
  ASSERT_EQ(flashAttnCreateWithBackend(&dead, g_target.backend), kSuccess) << fa_test::lastError();
  ASSERT_EQ(flashAttnDestroy(dead), kSuccess);
  auto f = forward();
  f.handle = dead;
  rejectEverywhere("forward: destroyed handle", {kNotInitialized}, {"handle"}, f);
  auto m = merge();
  m.handle = dead;
  expectRejected("merge: destroyed handle", {kNotInitialized}, {"handle"}, [&] { return m.run(); });
  flashAttnBackend_t backend = FLASHATTN_BACKEND_AUTO;
  expectRejected("GetBackend: destroyed handle", {kNotInitialized}, {"handle"},
                 [&] { return flashAttnGetBackend(dead, &backend); });
  EXPECT_EQ(backend, FLASHATTN_BACKEND_AUTO);
  expectRejected("SetStream: destroyed handle", {kNotInitialized}, {"handle"},
                 [&] { return flashAttnSetStream(dead, nullptr); });
  expectRejected("Destroy: handle destroyed twice", {kNotInitialized}, {"handle"},
                 [&] { return flashAttnDestroy(dead); });

  // A live object of another kind is not a handle: the registry is per kind.
  auto foreign = forward();
  foreign.handle = reinterpret_cast<flashAttnHandle_t>(static_cast<flashAttnTensorDescriptor_t>(*qD_));
  expectRejected("forward: tensor descriptor passed as handle", {kNotInitialized}, {"handle"},
                 [&] { return foreign.run(); });
}

// Asking for the CUDA backend where it cannot run: NO_DEVICE without a GPU or driver, NOT_SUPPORTED in a build
// without CUDA, ARCH_MISMATCH on a GPU older than sm80; never a handle.
TEST_F(BadInput, CudaHandleWhereNoneCanBeMade) {
  flashAttnHandle_t probe = nullptr;
  if (flashAttnCreateWithBackend(&probe, FLASHATTN_BACKEND_CUDA) == kSuccess) {
    flashAttnDestroy(probe);
    GTEST_SKIP() << "a CUDA handle can be made on this machine";
  }
  flashAttnHandle_t untouched = reinterpret_cast<flashAttnHandle_t>(&untouched);
  expectRejected("CreateWithBackend(CUDA) without a usable GPU",
                 {FLASHATTN_STATUS_NO_DEVICE, kNotSupported, FLASHATTN_STATUS_ARCH_MISMATCH}, {"CUDA", "GPU", "device"},
                 [&] { return flashAttnCreateWithBackend(&untouched, FLASHATTN_BACKEND_CUDA); });
  EXPECT_EQ(untouched, reinterpret_cast<flashAttnHandle_t>(&untouched)) << "handle written on failure";
  // A machine without the driver library is told so, not that its driver is too old.
  void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver) {
    dlclose(driver);
  } else if (flashAttnCreateWithBackend(&untouched, FLASHATTN_BACKEND_CUDA) == FLASHATTN_STATUS_NO_DEVICE) {
    EXPECT_NE(fa_test::lastError().find("no NVIDIA driver (libcuda.so.1 not found)"), std::string::npos)
        << fa_test::lastError();
  }
  // AUTO still gives a handle, on HOST.
  flashAttnHandle_t automatic = nullptr;
  flashAttnBackend_t backend = FLASHATTN_BACKEND_CUDA;
  ASSERT_EQ(flashAttnCreate(&automatic), kSuccess) << fa_test::lastError();
  EXPECT_EQ(flashAttnGetBackend(automatic, &backend), kSuccess);
  EXPECT_EQ(backend, FLASHATTN_BACKEND_HOST);
  EXPECT_EQ(flashAttnDestroy(automatic), kSuccess);
}

TEST_F(BadInput, NullDescriptors) {
  {
    auto c = forward();
    c.qDesc = nullptr;
    rejectEverywhere("forward: qDesc NULL", {kNotInitialized}, {"Q"}, c);
  }
  {
    auto c = forward();
    c.kDesc = nullptr;
    rejectEverywhere("forward: kDesc NULL", {kNotInitialized}, {"K"}, c);
  }
  {
    auto c = forward();
    c.vDesc = nullptr;
    rejectEverywhere("forward: vDesc NULL", {kNotInitialized}, {"V"}, c);
  }
  {
    auto c = forward();
    c.oDesc = nullptr;
    rejectEverywhere("forward: oDesc NULL", {kNotInitialized}, {"O"}, c);
  }
  {
    auto c = backward();
    c.dODesc = nullptr;
    rejectEverywhere("backward: dODesc NULL", {kNotInitialized}, {"dO"}, c, kOp);
    c = backward();
    c.dQDesc = nullptr;
    rejectEverywhere("backward: dQDesc NULL", {kNotInitialized}, {"dQ"}, c, kOp);
    c = backward();
    c.dKDesc = nullptr;
    rejectEverywhere("backward: dKDesc NULL", {kNotInitialized}, {"dK"}, c, kOp);
    c = backward();
    c.dVDesc = nullptr;
    rejectEverywhere("backward: dVDesc NULL", {kNotInitialized}, {"dV"}, c, kOp);
    // The LSE is optional for the forward but required here: a missing required descriptor, like Q above.
    c = backward();
    c.lseDesc = nullptr;
    c.lse = nullptr;
    rejectEverywhere("backward: lseDesc NULL", {kNotInitialized}, {"LSE"}, c, kOpAndSize);
  }
  {
    auto c = decode();
    c.qDesc = nullptr;
    rejectEverywhere("decode: qDesc NULL", {kNotInitialized}, {"Q"}, c);
  }
  {
    auto c = merge();
    c.partialODesc = nullptr;
    rejectEverywhere("merge: partialODesc NULL", {kNotInitialized}, {"partialO"}, c);
    c = merge();
    c.partialLseDesc = nullptr;
    rejectEverywhere("merge: partialLseDesc NULL", {kNotInitialized}, {"partialLse"}, c, kOpAndSize);
    c = merge();
    c.oDesc = nullptr;
    rejectEverywhere("merge: oDesc NULL", {kNotInitialized}, {"O"}, c);
  }
}

TEST_F(BadInput, DestroyedAndUnsetDescriptors) {
  {
    flashAttnTensorDescriptor_t dead = nullptr;
    ASSERT_EQ(flashAttnCreateTensorDescriptor(&dead), kSuccess);
    ASSERT_EQ(flashAttnSetTensorDescriptor(dead, kFp16, 4, Dims{B, KVH, SK, D}.data(), packed({B, KVH, SK, D}).data()),
              kSuccess);
    ASSERT_EQ(flashAttnDestroyTensorDescriptor(dead), kSuccess);
    auto c = forward();
    c.kDesc = dead;
    rejectEverywhere("forward: destroyed kDesc", {kNotInitialized}, {"K"}, c);
    int32_t rank = -7;
    expectRejected("GetTensorDescriptor: destroyed", {kNotInitialized}, {"desc"},
                   [&] { return flashAttnGetTensorDescriptor(dead, 0, nullptr, &rank, nullptr, nullptr); });
    EXPECT_EQ(rank, -7);
    expectRejected("SetTensorDescriptor: destroyed", {kNotInitialized}, {"desc"}, [&] {
      return flashAttnSetTensorDescriptor(dead, kFp16, 4, Dims{B, KVH, SK, D}.data(), packed({B, KVH, SK, D}).data());
    });
    expectRejected("DestroyTensorDescriptor: twice", {kNotInitialized}, {"desc"},
                   [&] { return flashAttnDestroyTensorDescriptor(dead); });
  }
  {
    fa_test::TensorDesc unset;
    auto c = forward();
    c.qDesc = unset;
    rejectEverywhere("forward: qDesc never set", {kNotInitialized}, {"Q"}, c);
    expectRejected("GetTensorDescriptor: never set", {kNotInitialized}, {"desc"},
                   [&] { return flashAttnGetTensorDescriptor(unset, 0, nullptr, nullptr, nullptr, nullptr); });
  }
  {
    flashAttnAttentionDescriptor_t dead = nullptr;
    ASSERT_EQ(flashAttnCreateAttentionDescriptor(&dead), kSuccess);
    ASSERT_EQ(flashAttnDestroyAttentionDescriptor(dead), kSuccess);
    auto c = forward();
    c.attn = dead;
    rejectEverywhere("forward: destroyed attnDesc", {kNotInitialized}, {"attnDesc"}, c);
    expectRejected("SetAttentionScale: destroyed", {kNotInitialized}, {"desc"},
                   [&] { return flashAttnSetAttentionScale(dead, 0.5f); });
    expectRejected("DestroyAttentionDescriptor: twice", {kNotInitialized}, {"desc"},
                   [&] { return flashAttnDestroyAttentionDescriptor(dead); });
  }
  {
    flashAttnSeqDescriptor_t dead = nullptr;
    ASSERT_EQ(flashAttnCreateSeqDescriptor(&dead), kSuccess);
    ASSERT_EQ(flashAttnDestroySeqDescriptor(dead), kSuccess);
    auto c = decode();
    c.seq = dead;
    rejectEverywhere("decode: destroyed seqDesc", {kNotInitialized}, {"seqDesc"}, c);
    expectRejected("SetSeqKvLengths: destroyed", {kNotInitialized}, {"desc"},
                   [&] { return flashAttnSetSeqKvLengths(dead, B, kvLengths_->as<int32_t>()); });
    expectRejected("DestroySeqDescriptor: twice", {kNotInitialized}, {"desc"},
                   [&] { return flashAttnDestroySeqDescriptor(dead); });
  }
}

// Every setter and getter of the three descriptor kinds with a NULL descriptor.
TEST_F(BadInput, DescriptorFunctionsWithNullDescriptor) {
  const Dims dims{B, H, SQ, D}, strides = packed(dims);
  float f = 0.f;
  int32_t i32 = 0;
  int64_t i64a = 0, i64b = 0;
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  const float *slopes = nullptr;
  float *dSinks = nullptr;
  const int32_t *array = nullptr, *array2 = nullptr;
  const std::vector<std::pair<std::string, std::function<flashAttnStatus_t()>>> calls = {
      {"SetTensorDescriptor", [&] { return flashAttnSetTensorDescriptor(nullptr, kFp16, 4, dims.data(), strides.data()); }},
      {"GetTensorDescriptor", [&] { return flashAttnGetTensorDescriptor(nullptr, 4, nullptr, nullptr, nullptr, nullptr); }},
      {"SetAttentionScale", [&] { return flashAttnSetAttentionScale(nullptr, 0.5f); }},
      {"GetAttentionScale", [&] { return flashAttnGetAttentionScale(nullptr, &f); }},
      {"SetAttentionMask", [&] { return flashAttnSetAttentionMask(nullptr, FLASHATTN_MASK_NONE); }},
      {"GetAttentionMask", [&] { return flashAttnGetAttentionMask(nullptr, &mask); }},
      {"SetAttentionWindow", [&] { return flashAttnSetAttentionWindow(nullptr, 1, 1); }},
      {"GetAttentionWindow", [&] { return flashAttnGetAttentionWindow(nullptr, &i64a, &i64b); }},
      {"SetAttentionSoftcap", [&] { return flashAttnSetAttentionSoftcap(nullptr, 1.f); }},
      {"GetAttentionSoftcap", [&] { return flashAttnGetAttentionSoftcap(nullptr, &f); }},
      {"SetAttentionAlibiSlopes", [&] { return flashAttnSetAttentionAlibiSlopes(nullptr, nullptr, 0); }},
      {"GetAttentionAlibiSlopes", [&] { return flashAttnGetAttentionAlibiSlopes(nullptr, &slopes, &i32); }},
      {"SetAttentionSinks", [&] { return flashAttnSetAttentionSinks(nullptr, nullptr); }},
      {"GetAttentionSinks", [&] { return flashAttnGetAttentionSinks(nullptr, &slopes); }},
      {"SetAttentionSinksGradient", [&] { return flashAttnSetAttentionSinksGradient(nullptr, nullptr); }},
      {"GetAttentionSinksGradient", [&] { return flashAttnGetAttentionSinksGradient(nullptr, &dSinks); }},
      {"SetAttentionDeterministic", [&] { return flashAttnSetAttentionDeterministic(nullptr, 1); }},
      {"GetAttentionDeterministic", [&] { return flashAttnGetAttentionDeterministic(nullptr, &i32); }},
      {"SetSeqRagged", [&] { return flashAttnSetSeqRagged(nullptr, B, cuQ_->as<int32_t>(), cuK_->as<int32_t>(), 5, 9); }},
      {"GetSeqRagged", [&] { return flashAttnGetSeqRagged(nullptr, &i64a, &array, &array2, &i64a, &i64b); }},
      {"SetSeqKvLengths", [&] { return flashAttnSetSeqKvLengths(nullptr, B, kvLengths_->as<int32_t>()); }},
      {"GetSeqKvLengths", [&] { return flashAttnGetSeqKvLengths(nullptr, &i64a, &array); }},
      {"SetSeqPaged", [&] { return flashAttnSetSeqPaged(nullptr, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ); }},
      {"GetSeqPaged", [&] { return flashAttnGetSeqPaged(nullptr, &i64a, &array, &i64b); }},
  };
  for (const auto &[name, call] : calls) expectRejected(name + ": desc NULL", {kNotInitialized}, {"desc"}, call);
}

// ---------------------------------------------------------------------------------------------------------------------
// NULL output pointers of creators and getters, and out-of-range enum arguments: BAD_PARAM.

TEST_F(BadInput, NullOutputPointersAndBadEnums) {
  expectRejected("Create: handle pointer NULL", {kBadParam}, {"handle"}, [&] { return flashAttnCreate(nullptr); });
  expectRejected("CreateWithBackend: handle pointer NULL", {kBadParam}, {"handle"},
                 [&] { return flashAttnCreateWithBackend(nullptr, FLASHATTN_BACKEND_HOST); });
  flashAttnHandle_t untouched = reinterpret_cast<flashAttnHandle_t>(&untouched);
  for (int backend : {3, -1, 1000}) {
    expectRejected("CreateWithBackend: backend " + std::to_string(backend), {kBadParam}, {"backend"},
                   [&] { return rawCreateWithBackend(&untouched, backend); });
    EXPECT_EQ(untouched, reinterpret_cast<flashAttnHandle_t>(&untouched)) << "handle written on failure";
  }
  expectRejected("CreateTensorDescriptor: NULL", {kBadParam}, {"desc"},
                 [&] { return flashAttnCreateTensorDescriptor(nullptr); });
  expectRejected("CreateAttentionDescriptor: NULL", {kBadParam}, {"desc"},
                 [&] { return flashAttnCreateAttentionDescriptor(nullptr); });
  expectRejected("CreateSeqDescriptor: NULL", {kBadParam}, {"desc"},
                 [&] { return flashAttnCreateSeqDescriptor(nullptr); });
  expectRejected("GetBackend: output NULL", {kBadParam}, {"backend"},
                 [&] { return flashAttnGetBackend(handle_, nullptr); });
  expectRejected("GetStream: output NULL", {kBadParam}, {"stream"}, [&] { return flashAttnGetStream(handle_, nullptr); });
  expectRejected("GetAttentionScale: output NULL", {kBadParam}, {"scale"},
                 [&] { return flashAttnGetAttentionScale(attn_, nullptr); });
  expectRejected("GetAttentionMask: output NULL", {kBadParam}, {"mask"},
                 [&] { return flashAttnGetAttentionMask(attn_, nullptr); });
  int64_t left = 0;
  expectRejected("GetAttentionWindow: right NULL", {kBadParam}, {"right"},
                 [&] { return flashAttnGetAttentionWindow(attn_, &left, nullptr); });
  expectRejected("GetAttentionSoftcap: output NULL", {kBadParam}, {"softcap"},
                 [&] { return flashAttnGetAttentionSoftcap(attn_, nullptr); });
  expectRejected("GetAttentionAlibiSlopes: slopes NULL", {kBadParam}, {"slopes"},
                 [&] { return flashAttnGetAttentionAlibiSlopes(attn_, nullptr, nullptr); });
  expectRejected("GetAttentionDeterministic: output NULL", {kBadParam}, {"deterministic"},
                 [&] { return flashAttnGetAttentionDeterministic(attn_, nullptr); });
  expectRejected("GetTensorDescriptor: maxRank -1", {kBadParam}, {"maxRank"},
                 [&] { return flashAttnGetTensorDescriptor(*qD_, -1, nullptr, nullptr, nullptr, nullptr); });

  auto f = forward();
  expectRejected("ForwardGetWorkspaceSize: bytes NULL", {kBadParam}, {"bytes"}, [&] { return f.size(nullptr); });
  auto bw = backward();
  expectRejected("BackwardGetWorkspaceSize: bytes NULL", {kBadParam}, {"bytes"}, [&] { return bw.size(nullptr); });
  auto d = decode();
  expectRejected("DecodeChunkGetWorkspaceSize: bytes NULL", {kBadParam}, {"bytes"}, [&] { return d.size(nullptr); });
  auto m = merge();
  expectRejected("MergeStatesGetWorkspaceSize: bytes NULL", {kBadParam}, {"bytes"}, [&] { return m.size(nullptr); });
  expectRejected("CheckSupport: description NULL with length 64", {kBadParam}, {"description"},
                 [&] { return f.support(nullptr, 64, nullptr); });
  for (int op : {4, -1}) {
    char text[16];
    std::memset(text, 0x5A, sizeof text);
    expectRejected("CheckSupport: operation " + std::to_string(op), {kBadParam}, {"operation"}, [&] {
      return rawCheckSupport(handle_, op, attn_, *qD_, *kD_, *vD_, *oD_, text, sizeof text);
    });
    EXPECT_TRUE(std::all_of(text, text + sizeof text, [](char c) { return c == 0x5A; }));
  }
  expectRejected("CheckSupport: merge with K and V descriptors", {kBadParam}, {"kDesc"}, [&] {
    return flashAttnCheckSupport(handle_, FLASHATTN_OP_MERGE_STATES, nullptr, nullptr, *partialOD_, *kD_, *vD_, *oD_,
                                 nullptr, 0, nullptr);
  });
}

// ---------------------------------------------------------------------------------------------------------------------
// NULL required data pointers, and a pointer given without its descriptor: BAD_PARAM.

TEST_F(BadInput, NullDataPointers) {
  {
    ForwardCall c = forward();
    c.q = nullptr;
    expectRejected("forward: Q NULL", {kBadParam}, {"Q"}, [&] { return c.run(); });
    c = forward();
    c.k = nullptr;
    expectRejected("forward: K NULL", {kBadParam}, {"K"}, [&] { return c.run(); });
    c = forward();
    c.v = nullptr;
    expectRejected("forward: V NULL", {kBadParam}, {"V"}, [&] { return c.run(); });
    c = forward();
    c.o = nullptr;
    expectRejected("forward: O NULL", {kBadParam}, {"O"}, [&] { return c.run(); });
    c = forward();
    c.lse = nullptr;
    expectRejected("forward: LSE NULL with its descriptor", {kBadParam}, {"LSE"}, [&] { return c.run(); });
    c = forward();
    c.lseDesc = nullptr;
    expectRejected("forward: LSE pointer without descriptor", {kBadParam}, {"LSE"}, [&] { return c.run(); });
  }
  {
    const struct {
      const char *name;
      const void *BackwardCall::*field;
    } inputs[] = {{"Q", &BackwardCall::q}, {"K", &BackwardCall::k}, {"V", &BackwardCall::v},
                  {"O", &BackwardCall::o}, {"dO", &BackwardCall::dO}};
    for (const auto &in : inputs) {
      BackwardCall c = backward();
      c.*in.field = nullptr;
      expectRejected(std::string("backward: ") + in.name + " NULL", {kBadParam}, {in.name}, [&] { return c.run(); });
    }
    const struct {
      const char *name;
      void *BackwardCall::*field;
    } outputs[] = {{"dQ", &BackwardCall::dQ}, {"dK", &BackwardCall::dK}, {"dV", &BackwardCall::dV}};
    for (const auto &out : outputs) {
      BackwardCall c = backward();
      c.*out.field = nullptr;
      expectRejected(std::string("backward: ") + out.name + " NULL", {kBadParam}, {out.name}, [&] { return c.run(); });
    }
    BackwardCall c = backward();
    c.lse = nullptr;
    expectRejected("backward: LSE NULL", {kBadParam}, {"LSE"}, [&] { return c.run(); });
  }
  {
    DecodeCall c = decode();
    c.q = nullptr;
    expectRejected("decode: Q NULL", {kBadParam}, {"Q"}, [&] { return c.run(); });
    c = decode();
    c.k = nullptr;
    expectRejected("decode: K NULL", {kBadParam}, {"K"}, [&] { return c.run(); });
    c = decode();
    c.o = nullptr;
    expectRejected("decode: O NULL", {kBadParam}, {"O"}, [&] { return c.run(); });
  }
  {
    MergeCall c = merge();
    c.partialO = nullptr;
    expectRejected("merge: partialO NULL", {kBadParam}, {"partialO"}, [&] { return c.run(); });
    c = merge();
    c.partialLse = nullptr;
    expectRejected("merge: partialLse NULL", {kBadParam}, {"partialLse"}, [&] { return c.run(); });
    c = merge();
    c.o = nullptr;
    expectRejected("merge: O NULL", {kBadParam}, {"O"}, [&] { return c.run(); });
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Tensor descriptor values: dtype, rank, dims, strides, sizes.

TEST_F(BadInput, TensorDescriptorValues) {
  const Dims dims{B, H, SQ, D}, strides = packed(dims);
  for (int dtype : {3, -1, 255})
    expectSetRejected("Set: dataType " + std::to_string(dtype), {"dataType", "type"}, dtype, 4,
                      dims.data(), strides.data());
  for (int rank : {0, -1, FLASHATTN_MAX_TENSOR_RANK + 1}) {
    const Dims many(16, 2), manyStrides(16, 1);
    expectSetRejected("Set: rank " + std::to_string(rank), {"rank"}, kFp16, rank, many.data(), manyStrides.data());
  }
  expectSetRejected("Set: dims NULL", {"dims"}, kFp16, 4, nullptr, strides.data());
  expectSetRejected("Set: strides NULL", {"strides"}, kFp16, 4, dims.data(), nullptr);
  for (int64_t bad : {int64_t(0), int64_t(-1), std::numeric_limits<int64_t>::min()}) {
    for (int axis : {0, 3}) {
      Dims d = dims;
      d[size_t(axis)] = bad;
      expectSetRejected("Set: dims[" + std::to_string(axis) + "] = " + std::to_string(bad), {"dims", "dim"}, kFp16, 4,
                        d.data(), strides.data());
    }
  }
  for (int64_t bad : {int64_t(2), int64_t(0), int64_t(-1)}) {
    Dims s = strides;
    s[3] = bad;
    expectSetRejected("Set: head-dim stride " + std::to_string(bad), {"stride"}, kFp16, 4, dims.data(), s.data());
  }
  for (int axis : {0, 1, 2}) {
    Dims s = strides;
    s[size_t(axis)] = -s[size_t(axis)];
    expectSetRejected("Set: negative stride on axis " + std::to_string(axis), {"stride"}, kFp16, 4, dims.data(),
                      s.data());
  }
  // Sizes no index arithmetic should be asked to handle: a dimension or stride near 2^62 overflows int64 spans.
  {
    Dims d = dims;
    d[0] = int64_t(1) << 62;
    expectSetRejected("Set: dims[0] = 2^62", {"dims", "dim"}, kFp16, 4, d.data(), strides.data());
    Dims s = strides;
    s[0] = int64_t(1) << 62;
    expectSetRejected("Set: strides[0] = 2^62", {"stride"}, kFp16, 4, dims.data(), s.data());
  }
}

// Tensors the descriptor accepts one by one but whose byte span passes 2^63 (here about 2^80 bytes): the operation
// must refuse them rather than wrap its offsets.
TEST_F(BadInput, SpanPastInt64) {
  const int64_t hugeBatch = int64_t(1) << 40;
  const int64_t hugeStride = int64_t(1) << 40;
  fa_test::TensorDesc q, k, v, o;
  const auto setHuge = [&](fa_test::TensorDesc &d, int64_t heads, int64_t seq) {
    const Dims dims{hugeBatch, heads, seq, D};
    Dims strides = packed({1, heads, seq, D});
    strides[0] = hugeStride;
    return d.set(kFp16, dims, strides);
  };
  if (setHuge(q, H, SQ) != kSuccess || setHuge(k, KVH, SK) != kSuccess || setHuge(v, KVH, SK) != kSuccess ||
      setHuge(o, H, SQ) != kSuccess) {
    // A library may refuse these already at Set time; then that refusal is the case.
    expectSetRejected("Set: batch 2^40 with batch stride 2^40", {"dims", "stride", "bytes"}, kFp16, 4,
                      Dims{hugeBatch, H, SQ, D}.data(), Dims{hugeStride, SQ * D, D, 1}.data());
    return;
  }
  auto c = forward();
  c.qDesc = q;
  c.kDesc = k;
  c.vDesc = v;
  c.oDesc = o;
  c.lseDesc = nullptr;
  c.lse = nullptr;
  rejectEverywhere("forward: tensors spanning ~2^80 bytes", {kBadParam, kNotSupported}, {"Q", "K", "V", "O"}, c);
}

// The CUDA kernels index grids and rows with 32-bit counts; a problem past that must be refused before any launch.
// CheckSupport is asked first so that a library that wrongly accepts does not launch on these small buffers.
TEST_F(BadInput, CudaSizesPastKernelLimits) {
  if (!onCuda()) GTEST_SKIP() << "the HOST backend addresses any int64 size; these limits are the CUDA kernels'";
  struct Huge {
    const char *name;
    int64_t batch, heads, seqQ, seqK;
  } cases[] = {{"seqQ 2^31 + 64", 1, 1, (int64_t(1) << 31) + 64, 64},
               {"seqK 2^31 + 64", 1, 1, 64, (int64_t(1) << 31) + 64},
               {"batch x heads 2^32", int64_t(1) << 16, int64_t(1) << 16, 1, 64}};
  for (const Huge &h : cases) {
    auto q = makeDesc(kFp16, {h.batch, h.heads, h.seqQ, D});
    auto kv = makeDesc(kFp16, {h.batch, h.heads, h.seqK, D});
    auto o = makeDesc(kFp16, {h.batch, h.heads, h.seqQ, D});
    auto c = forward();
    c.qDesc = *q;
    c.kDesc = c.vDesc = *kv;
    c.oDesc = *o;
    c.lseDesc = nullptr;
    c.lse = nullptr;
    const flashAttnStatus_t support = c.support(nullptr, 0, nullptr);
    if (support == kSuccess) {
      ADD_FAILURE() << "forward with " << h.name << ": CheckSupport accepts it; not launching on small buffers";
      continue;
    }
    rejectEverywhere(std::string("forward: ") + h.name, {kBadParam, kNotSupported},
                     {"seqQ", "seqK", "batch", "heads", "grid", "2^31", "32-bit", "int32"}, c);
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Types: mixed storage types, and the FP32 that LSE and partial states require.

TEST_F(BadInput, MixedTypes) {
  auto kBf = makeDesc(kBf16, {B, KVH, SK, D});
  auto vF32 = makeDesc(kFp32, {B, KVH, SK, D});
  auto oBf = makeDesc(kBf16, {B, H, SQ, D});
  auto lse16 = makeDesc(kFp16, {B, H, SQ});
  auto c = forward();
  c.kDesc = *kBf;
  rejectEverywhere("forward: Q FP16, K BF16", {kBadParam}, {"K"}, c);
  c = forward();
  c.vDesc = *vF32;
  rejectEverywhere("forward: Q FP16, V FP32", {kBadParam}, {"V"}, c);
  c = forward();
  c.oDesc = *oBf;
  rejectEverywhere("forward: Q FP16, O BF16", {kBadParam}, {"O"}, c);
  c = forward();
  c.lseDesc = *lse16;
  rejectEverywhere("forward: LSE FP16", {kBadParam}, {"LSE"}, c, kOpAndSize);

  auto dO16 = makeDesc(kBf16, {B, H, SQ, D});
  auto dQ32 = makeDesc(kFp32, {B, H, SQ, D});
  auto dK16 = makeDesc(kBf16, {B, KVH, SK, D});
  auto bw = backward();
  bw.dODesc = *dO16;
  rejectEverywhere("backward: dO BF16, Q FP16", {kBadParam}, {"dO"}, bw, kOp);
  bw = backward();
  bw.dQDesc = *dQ32;
  rejectEverywhere("backward: dQ FP32, Q FP16", {kBadParam}, {"dQ"}, bw, kOp);
  bw = backward();
  bw.dKDesc = *dK16;
  rejectEverywhere("backward: dK BF16, K FP16", {kBadParam}, {"dK"}, bw, kOp);
  bw = backward();
  bw.lseDesc = *lse16;
  rejectEverywhere("backward: LSE FP16", {kBadParam}, {"LSE"}, bw, kOpAndSize);

  auto cacheBf = makeDesc(kBf16, {B, KVH, CACHE, D});
  auto d = decode();
  d.kDesc = *cacheBf;
  rejectEverywhere("decode: Q FP16, K cache BF16", {kBadParam}, {"K"}, d);

  auto partial16 = makeDesc(kFp16, {STATES, B, H, SQ, D});
  auto partialLse16 = makeDesc(kFp16, {STATES, B, H, SQ});
  auto m = merge();
  m.partialODesc = *partial16;
  rejectEverywhere("merge: partialO FP16", {kBadParam}, {"partialO"}, m);
  m = merge();
  m.partialLseDesc = *partialLse16;
  rejectEverywhere("merge: partialLse FP16", {kBadParam}, {"partialLse"}, m, kOpAndSize);
  m = merge();
  m.lseDesc = *lse16;
  rejectEverywhere("merge: LSE FP16", {kBadParam}, {"LSE"}, m, kOpAndSize);
}

// ---------------------------------------------------------------------------------------------------------------------
// Shapes: ranks, head counts, head dims, and every dimension two tensors must share.

TEST_F(BadInput, Ranks) {
  auto q3 = makeDesc(kFp16, {B * H, SQ, D});
  auto k5 = makeDesc(kFp16, {1, B, KVH, SK, D});
  auto o3 = makeDesc(kFp16, {B * H, SQ, D});
  auto lse4 = makeDesc(kFp32, {B, H, SQ, 1});
  auto lse2 = makeDesc(kFp32, {B * H, SQ});
  auto c = forward();
  c.qDesc = *q3;
  rejectEverywhere("forward: Q rank 3 without a ragged seqDesc", {kBadParam}, {"Q"}, c);
  c = forward();
  c.kDesc = *k5;
  rejectEverywhere("forward: K rank 5", {kBadParam}, {"K"}, c);
  c = forward();
  c.oDesc = *o3;
  rejectEverywhere("forward: O rank 3", {kBadParam}, {"O"}, c);
  c = forward();
  c.lseDesc = *lse4;
  rejectEverywhere("forward: LSE rank 4", {kBadParam}, {"LSE"}, c, kOpAndSize);
  c = forward();
  c.lseDesc = *lse2;
  rejectEverywhere("forward: LSE rank 2 without a ragged seqDesc", {kBadParam}, {"LSE"}, c, kOpAndSize);

  // Ragged tensors are rank 3: a rank-4 Q with a ragged seqDesc is wrong.
  auto r = raggedForward();
  r.qDesc = *qD_;
  rejectEverywhere("ragged forward: Q rank 4", {kBadParam}, {"Q"}, r);

  auto partial4 = makeDesc(kFp32, {B, H, SQ, D});
  auto m = merge();
  m.partialODesc = *partial4;
  rejectEverywhere("merge: partialO rank 4", {kBadParam}, {"partialO"}, m);
  m = merge();
  m.oDesc = *o3;
  rejectEverywhere("merge: O rank 3", {kBadParam}, {"O"}, m);
}

TEST_F(BadInput, HeadCounts) {
  auto k3 = makeDesc(kFp16, {B, 3, SK, D});
  auto v3 = makeDesc(kFp16, {B, 3, SK, D});
  auto v1 = makeDesc(kFp16, {B, 1, SK, D});
  auto o2 = makeDesc(kFp16, {B, 2, SQ, D});
  auto c = forward();
  c.kDesc = *k3;
  c.vDesc = *v3;
  rejectEverywhere("forward: 4 Q heads, 3 KV heads", {kBadParam}, {"heads", "kvHeads"}, c);
  c = forward();
  c.vDesc = *v1;
  rejectEverywhere("forward: K 2 heads, V 1 head", {kBadParam}, {"heads", "kvHeads"}, c);
  c = forward();
  c.oDesc = *o2;
  rejectEverywhere("forward: O 2 heads, Q 4", {kBadParam}, {"heads"}, c);
  // More KV heads than query heads is never a multiple.
  auto k8 = makeDesc(kFp16, {B, 8, SK, D});
  c = forward();
  c.kDesc = c.vDesc = *k8;
  rejectEverywhere("forward: 4 Q heads, 8 KV heads", {kBadParam}, {"heads", "kvHeads"}, c);

  auto cache3 = makeDesc(kFp16, {B, 3, CACHE, D});
  auto d = decode();
  d.kDesc = d.vDesc = *cache3;
  rejectEverywhere("decode: 4 Q heads, 3 KV heads", {kBadParam}, {"heads", "kvHeads"}, d);
}

TEST_F(BadInput, HeadDims) {
  auto k32 = makeDesc(kFp16, {B, KVH, SK, 32});
  auto o32 = makeDesc(kFp16, {B, H, SQ, 32});
  auto c = forward();
  c.kDesc = *k32;
  rejectEverywhere("forward: Q headDim 64, K headDim 32", {kBadParam}, {"headDim", "head dim"}, c);
  c = forward();
  c.oDesc = *o32;
  rejectEverywhere("forward: V headDim 64, O headDim 32", {kBadParam}, {"headDimV", "headDim", "head dim"}, c);
  // headDim 0 cannot even be described.
  expectSetRejected("Set: headDim 0", {"dims", "dim"}, kFp16, 4, Dims{B, H, SQ, 0}.data(),
                    packed({B, H, SQ, 1}).data());
}

TEST_F(BadInput, CudaUnsupportedHeadDim) {
  if (!onCuda()) GTEST_SKIP() << "the HOST reference serves every head dim";
  auto q = makeDesc(kFp16, {B, H, SQ, 1024});
  auto kv = makeDesc(kFp16, {B, KVH, SK, 1024});
  auto c = forward();
  c.qDesc = c.oDesc = *q;
  c.kDesc = c.vDesc = *kv;
  c.lseDesc = nullptr;
  c.lse = nullptr;
  // Pointers stay those of the small buffers: a correct library refuses in the plan, before touching them.
  rejectEverywhere("forward: headDim 1024 on CUDA", {kNotSupported}, {"headDim", "head dim", "1024"}, c);
}

TEST_F(BadInput, MismatchedDimensions) {
  auto kBatch = makeDesc(kFp16, {B + 1, KVH, SK, D});
  auto vSeq = makeDesc(kFp16, {B, KVH, SK + 1, D});
  auto oSeq = makeDesc(kFp16, {B, H, SQ + 1, D});
  auto oBatch = makeDesc(kFp16, {B + 1, H, SQ, D});
  auto c = forward();
  c.kDesc = *kBatch;
  c.vDesc = *kBatch;
  rejectEverywhere("forward: K batch 3, Q batch 2", {kBadParam}, {"batch"}, c);
  c = forward();
  c.vDesc = *vSeq;
  rejectEverywhere("forward: V seqK 17, K seqK 16", {kBadParam}, {"seqK", "V"}, c);
  c = forward();
  c.oDesc = *oSeq;
  rejectEverywhere("forward: O seqQ 9, Q seqQ 8", {kBadParam}, {"seqQ", "O"}, c);
  c = forward();
  c.oDesc = *oBatch;
  rejectEverywhere("forward: O batch 3, Q batch 2", {kBadParam}, {"batch", "O"}, c);

  auto r = raggedForward();
  auto oRag = makeDesc(kFp16, {RAG_TQ + 1, H, D});
  r.oDesc = *oRag;
  rejectEverywhere("ragged forward: O 9 tokens, Q 8", {kBadParam}, {"tokens", "O"}, r);

  auto m = merge();
  auto partialLse2 = makeDesc(kFp32, {STATES - 1, B, H, SQ});
  auto oMerge = makeDesc(kFp16, {B, H, SQ, D / 2});
  m.partialLseDesc = *partialLse2;
  rejectEverywhere("merge: partialLse 2 states, partialO 3", {kBadParam}, {"partialLse", "states"}, m, kOpAndSize);
  m = merge();
  m.oDesc = *oMerge;
  rejectEverywhere("merge: O headDimV 32, partialO 64", {kBadParam}, {"headDimV", "O"}, m);
}

TEST_F(BadInput, LseShapes) {
  auto lseSeq = makeDesc(kFp32, {B, H, SQ + 1});
  auto lseHeads = makeDesc(kFp32, {B, H - 1, SQ});
  auto lseOverlap = makeDesc(kFp32, {B, H, SQ}, {SQ, 0, 1});  // all heads of a batch write the same row
  auto c = forward();
  c.lseDesc = *lseSeq;
  rejectEverywhere("forward: LSE seqQ 9, Q 8", {kBadParam}, {"LSE"}, c, kOpAndSize);
  c = forward();
  c.lseDesc = *lseHeads;
  rejectEverywhere("forward: LSE 3 heads, Q 4", {kBadParam}, {"LSE"}, c, kOpAndSize);
  c = forward();
  c.lseDesc = *lseOverlap;
  rejectEverywhere("forward: LSE heads overlapping (head stride 0)", {kBadParam}, {"LSE"}, c, kOpAndSize);
  auto bw = backward();
  bw.lseDesc = *lseSeq;
  rejectEverywhere("backward: LSE seqQ 9, Q 8", {kBadParam}, {"LSE"}, bw, kOpAndSize);
  auto lseDec = makeDesc(kFp32, {B, H, DEC_SQ + 1});
  auto d = decode();
  d.lseDesc = *lseDec;
  rejectEverywhere("decode: LSE seqQ 3, Q 2", {kBadParam}, {"LSE"}, d, kOpAndSize);
  auto m = merge();
  m.lseDesc = *lseHeads;
  rejectEverywhere("merge: LSE 3 heads, partialO 4", {kBadParam}, {"LSE"}, m, kOpAndSize);
  auto r = raggedForward();
  auto lseRag = makeDesc(kFp32, {RAG_TQ, H + 1});
  r.lseDesc = *lseRag;
  rejectEverywhere("ragged forward: LSE 5 heads, Q 4", {kBadParam}, {"LSE"}, r, kOpAndSize);
}

TEST_F(BadInput, BackwardShapes) {
  auto dQSeq = makeDesc(kFp16, {B, H, SQ + 1, D});
  auto dOHeads = makeDesc(kFp16, {B, H / 2, SQ, D});
  auto dKSeq = makeDesc(kFp16, {B, KVH, SK - 1, D});
  auto dVDim = makeDesc(kFp16, {B, KVH, SK, D / 2});
  // A stride-0 KV head may broadcast an input, never an output that the heads would all write.
  auto dKBroadcast = makeDesc(kFp16, {B, KVH, SK, D}, {SK * D, 0, D, 1});
  auto c = backward();
  c.dQDesc = *dQSeq;
  rejectEverywhere("backward: dQ seqQ 9, Q 8", {kBadParam}, {"dQ"}, c, kOp);
  c = backward();
  c.dODesc = *dOHeads;
  rejectEverywhere("backward: dO 2 heads, Q 4", {kBadParam}, {"dO"}, c, kOp);
  c = backward();
  c.dKDesc = *dKSeq;
  rejectEverywhere("backward: dK seqK 15, K 16", {kBadParam}, {"dK"}, c, kOp);
  c = backward();
  c.dVDesc = *dVDim;
  rejectEverywhere("backward: dV headDim 32, V 64", {kBadParam}, {"dV"}, c, kOp);
  c = backward();
  c.dKDesc = *dKBroadcast;
  rejectEverywhere("backward: dK with KV-head stride 0", {kBadParam}, {"dK"}, c, kOp);
  c = backward();
  c.seq = pagedSeq_;
  rejectEverywhere("backward: paged seqDesc", {kBadParam, kNotSupported}, {"paged", "seqDesc"}, c, kOpAndSize);
}

TEST_F(BadInput, OverlappingOutputElements) {
  // O with head stride 0: four heads would write the same elements.
  auto oBroadcast = makeDesc(kFp16, {B, H, SQ, D}, {SQ * D, 0, D, 1});
  auto c = forward();
  c.oDesc = *oBroadcast;
  rejectEverywhere("forward: O with head stride 0", {kBadParam}, {"O"}, c);
  auto m = merge();
  m.oDesc = *oBroadcast;
  rejectEverywhere("merge: O with head stride 0", {kBadParam}, {"O"}, m);
}

TEST_F(BadInput, CudaOddGradientStridesNeedTheExactSizeQuery) {
  if (!onCuda()) GTEST_SKIP() << "the HOST reference takes any strides and stages nothing";
  // Rows of 68 FP16 elements (136 bytes) are not whole 16-byte vectors: the CUDA backward stages such tensors through
  // the workspace (tests/gpu checks the results). flashAttnBackwardGetWorkspaceSize sees no dO descriptor, so its size
  // is short for an odd dO: refused with a message naming the query that sees it, outputs untouched.
  auto dO = makeDesc(kFp16, {B, H, SQ, D}, {H * SQ * 68, SQ * 68, 68, 1});
  size_t plain = 0, exact = 0;
  ASSERT_EQ(flashAttnBackwardGetWorkspaceSize(handle_, attn_, nullptr, *qD_, *kD_, *vD_, *oD_, *lseD_, &plain),
            FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(flashAttnBackwardGetWorkspaceSizeWithGradients(handle_, attn_, nullptr, *qD_, *kD_, *vD_, *oD_, *dO,
                                                           *lseD_, *qD_, *kD_, *vD_, &exact),
            FLASHATTN_STATUS_SUCCESS);
  EXPECT_GT(exact, plain);
  auto bw = backward();
  bw.dODesc = *dO;
  bw.workspaceBytes = std::min(plain, bw.workspaceBytes);
  rejectEverywhere("backward: dO row stride 68 with the plain query's workspace", {kInsufficientWorkspace},
                   {"WithGradients"}, bw, kOp);
}

// ---------------------------------------------------------------------------------------------------------------------
// Pointers: aliasing and alignment.

TEST_F(BadInput, OutputsAliasingInputs) {
  const Keywords overlap{"overlap", "alias"};
  ForwardCall c = forward();
  c.o = const_cast<void *>(c.q);
  expectRejected("forward: O == Q", {kBadParam}, overlap, [&] { return c.run(); });
  c = forward();
  c.o = k_->data();  // K and O have the same byte size here
  expectRejected("forward: O == K", {kBadParam}, overlap, [&] { return c.run(); });
  c = forward();
  c.o = q_->data(64);  // partial overlap, still inside Q's allocation slack
  expectRejected("forward: O starts inside Q", {kBadParam}, overlap, [&] { return c.run(); });
  c = forward();
  c.lse = o_->as<float>();
  expectRejected("forward: LSE inside O", {kBadParam}, overlap, [&] { return c.run(); });
  c = forward();
  c.lse = const_cast<float *>(static_cast<const float *>(c.v));
  expectRejected("forward: LSE inside V", {kBadParam}, overlap, [&] { return c.run(); });

  BackwardCall bw = backward();
  bw.dQ = const_cast<void *>(bw.dO);
  expectRejected("backward: dQ == dO", {kBadParam}, overlap, [&] { return bw.run(); });
  bw = backward();
  bw.dK = const_cast<void *>(bw.k);
  expectRejected("backward: dK == K", {kBadParam}, overlap, [&] { return bw.run(); });
  bw = backward();
  bw.dV = bw.dK;
  expectRejected("backward: dV == dK", {kBadParam}, overlap, [&] { return bw.run(); });
  bw = backward();
  bw.dQ = oIn_->data();
  expectRejected("backward: dQ == O", {kBadParam}, overlap, [&] { return bw.run(); });

  DecodeCall d = decode();
  d.o = const_cast<void *>(d.q);
  expectRejected("decode: O == Q", {kBadParam}, overlap, [&] { return d.run(); });
  d = decode();
  d.o = const_cast<void *>(d.k);
  expectRejected("decode: O inside the K cache", {kBadParam}, overlap, [&] { return d.run(); });

  MergeCall m = merge();
  m.o = const_cast<float *>(m.partialO);
  expectRejected("merge: O == partialO", {kBadParam}, overlap, [&] { return m.run(); });
  m = merge();
  m.lse = const_cast<float *>(m.partialLse);
  expectRejected("merge: LSE == partialLse", {kBadParam}, overlap, [&] { return m.run(); });
  m = merge();
  m.lse = static_cast<float *>(m.o);
  expectRejected("merge: LSE inside O", {kBadParam}, overlap, [&] { return m.run(); });
}

TEST_F(BadInput, MisalignedPointers) {
  ForwardCall c = forward();
  c.q = q_->data(1);
  expectRejected("forward: Q at an odd address (FP16)", {kBadParam}, {"Q"}, [&] { return c.run(); });
  c = forward();
  c.k = k_->data(1);
  expectRejected("forward: K at an odd address", {kBadParam}, {"K"}, [&] { return c.run(); });
  c = forward();
  c.v = v_->data(3);
  expectRejected("forward: V at an odd address", {kBadParam}, {"V"}, [&] { return c.run(); });
  c = forward();
  c.o = o_->data(1);
  expectRejected("forward: O at an odd address", {kBadParam}, {"O"}, [&] { return c.run(); });
  c = forward();
  c.lse = lse_->as<float>(2);
  expectRejected("forward: LSE 2-byte aligned (FP32)", {kBadParam}, {"LSE"}, [&] { return c.run(); });

  BackwardCall bw = backward();
  bw.dO = dO_->data(1);
  expectRejected("backward: dO at an odd address", {kBadParam}, {"dO"}, [&] { return bw.run(); });
  bw = backward();
  bw.dQ = dQ_->data(1);
  expectRejected("backward: dQ at an odd address", {kBadParam}, {"dQ"}, [&] { return bw.run(); });
  bw = backward();
  bw.lse = lseIn_->as<float>(1);
  expectRejected("backward: LSE at an odd address", {kBadParam}, {"LSE"}, [&] { return bw.run(); });

  DecodeCall d = decode();
  d.v = vCache_->data(1);
  expectRejected("decode: V cache at an odd address", {kBadParam}, {"V"}, [&] { return d.run(); });

  MergeCall m = merge();
  m.partialO = partialO_->as<float>(2);
  expectRejected("merge: partialO 2-byte aligned (FP32)", {kBadParam}, {"partialO"}, [&] { return m.run(); });
  m = merge();
  m.partialLse = partialLse_->as<float>(1);
  expectRejected("merge: partialLse at an odd address", {kBadParam}, {"partialLse"}, [&] { return m.run(); });

  fa_test::AttnDesc attn;
  const float *before = reinterpret_cast<const float *>(std::uintptr_t(0x1000));
  ASSERT_EQ(flashAttnSetAttentionAlibiSlopes(attn, before, 0), kSuccess);
  expectRejected("SetAttentionAlibiSlopes: slopes at an odd address", {kBadParam}, {"slopes"},
                 [&] { return flashAttnSetAttentionAlibiSlopes(attn, lse_->as<float>(1), 0); });
  const float *after = nullptr;
  ASSERT_EQ(flashAttnGetAttentionAlibiSlopes(attn, &after, nullptr), kSuccess);
  EXPECT_EQ(after, before) << "a rejected setter changed the slopes";
}

TEST_F(BadInput, CudaPointersNotVectorAligned) {
  if (!onCuda()) GTEST_SKIP() << "the HOST reference takes any element-aligned pointer";
  BackwardCall bw = backward();
  bw.q = q_->data(2);  // element-aligned, not 16-byte aligned
  expectRejected("backward: Q 2-byte but not 16-byte aligned on CUDA", {kNotSupported}, {"Q"},
                 [&] { return bw.run(); });
  auto d = decode();
  d.q = static_cast<const char *>(d.q) + 2;
  expectRejected("decode: Q 2-byte but not 16-byte aligned on CUDA", {kNotSupported}, {"Q"}, [&] { return d.run(); });
}

// ---------------------------------------------------------------------------------------------------------------------
// Workspace: too small, NULL, misaligned, overlapping an output.

TEST_F(BadInput, Workspace) {
  int withWorkspace = 0;
  const auto casesFor = [&](const std::string &op, auto call) {
    std::size_t need = 0;
    if (call.size(&need) != kSuccess) {
      ADD_FAILURE() << op << ": the size query of the valid call failed: " << fa_test::lastError();
      return;
    }
    if (need == 0) return;  // nothing can be too small
    ++withWorkspace;
    auto c = call;
    c.workspaceBytes = need - 1;
    expectRejected(op + ": workspace one byte short", {kInsufficientWorkspace}, {"workspace"}, [&] { return c.run(); });
    c = call;
    c.workspace = nullptr;
    c.workspaceBytes = 0;
    expectRejected(op + ": no workspace", {kInsufficientWorkspace}, {"workspace"}, [&] { return c.run(); });
    c = call;
    c.workspace = nullptr;
    c.workspaceBytes = need;
    expectRejected(op + ": workspace NULL with its size", {kBadParam}, {"workspace"}, [&] { return c.run(); });
    c = call;
    c.workspace = workspace_->data(16);
    c.workspaceBytes = need;
    expectRejected(op + ": workspace 16-byte aligned, not 256", {kBadParam}, {"workspace"}, [&] { return c.run(); });
  };
  casesFor("forward", forward());
  casesFor("paged forward", pagedForward());
  casesFor("ragged paged forward", raggedPagedForward());
  casesFor("backward", backward());
  casesFor("decode", decode());
  casesFor("paged decode", paged());
  casesFor("merge", merge());

  // The decode output placed inside its own workspace. O and LSE stay inside the workspace allocation.
  DecodeCall d = decode();
  std::size_t need = 0;
  if (d.size(&need) == kSuccess && need > 0) {
    d.o = workspace_->data(256);
    expectRejected("decode: O inside the workspace", {kBadParam}, {"workspace", "overlap"}, [&] { return d.run(); });
  }
  if (withWorkspace == 0) GTEST_SKIP() << "no valid call needs a workspace on " << g_target.name;
}

// ---------------------------------------------------------------------------------------------------------------------
// Attention attributes: each setter refuses and leaves the descriptor as it was.

TEST_F(BadInput, AttentionAttributes) {
  fa_test::AttnDesc desc;
  ASSERT_EQ(flashAttnSetAttentionScale(desc, 0.25f), kSuccess);
  ASSERT_EQ(flashAttnSetAttentionWindow(desc, 3, 4), kSuccess);
  ASSERT_EQ(flashAttnSetAttentionSoftcap(desc, 7.f), kSuccess);
  ASSERT_EQ(flashAttnSetAttentionMask(desc, FLASHATTN_MASK_CAUSAL_TOP_LEFT), kSuccess);
  ASSERT_EQ(flashAttnSetAttentionDeterministic(desc, 1), kSuccess);
  const auto unchanged = [&](const std::string &name) {
    float scale = 0, softcap = 0;
    int64_t left = 0, right = 0;
    flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
    int32_t deterministic = 0, perBatch = 7;
    const float *slopes = reinterpret_cast<const float *>(&scale);
    ASSERT_EQ(flashAttnGetAttentionScale(desc, &scale), kSuccess);
    ASSERT_EQ(flashAttnGetAttentionWindow(desc, &left, &right), kSuccess);
    ASSERT_EQ(flashAttnGetAttentionSoftcap(desc, &softcap), kSuccess);
    ASSERT_EQ(flashAttnGetAttentionMask(desc, &mask), kSuccess);
    ASSERT_EQ(flashAttnGetAttentionDeterministic(desc, &deterministic), kSuccess);
    ASSERT_EQ(flashAttnGetAttentionAlibiSlopes(desc, &slopes, &perBatch), kSuccess);
    EXPECT_TRUE(scale == 0.25f && left == 3 && right == 4 && softcap == 7.f && mask == FLASHATTN_MASK_CAUSAL_TOP_LEFT &&
                deterministic == 1 && slopes == nullptr && perBatch == 0)
        << name << " changed the descriptor";
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf, -1.f, -0.f, 0.f}) {
    const std::string name = "SetAttentionScale(" + floatText(bad) + ")";
    expectRejected(name, {kBadParam}, {"scale"}, [&] { return flashAttnSetAttentionScale(desc, bad); });
    unchanged(name);
  }
  for (float bad : {nan, inf, -1.f, -1e-30f}) {
    const std::string name = "SetAttentionSoftcap(" + floatText(bad) + ")";
    expectRejected(name, {kBadParam}, {"softcap"}, [&] { return flashAttnSetAttentionSoftcap(desc, bad); });
    unchanged(name);
  }
  for (const auto &window : {std::pair<int64_t, int64_t>{-2, 0}, {0, -2}, {std::numeric_limits<int64_t>::min(), -1}}) {
    const int64_t left = window.first, right = window.second;
    const std::string name = "SetAttentionWindow(" + std::to_string(left) + ", " + std::to_string(right) + ")";
    expectRejected(name, {kBadParam}, {"window", left < -1 ? "left" : "right"},
                   [&] { return flashAttnSetAttentionWindow(desc, left, right); });
    unchanged(name);
  }
  for (int bad : {3, -1}) {
    const std::string name = "SetAttentionMask(" + std::to_string(bad) + ")";
    expectRejected(name, {kBadParam}, {"mask"},
                   [&] { return rawSetAttentionMask(desc, bad); });
    unchanged(name);
  }
  for (int bad : {2, -1}) {
    const std::string name = "SetAttentionDeterministic(" + std::to_string(bad) + ")";
    expectRejected(name, {kBadParam}, {"deterministic"},
                   [&] { return flashAttnSetAttentionDeterministic(desc, bad); });
    unchanged(name);
  }
  for (int bad : {2, -1}) {
    const std::string name = "SetAttentionAlibiSlopes(perBatch " + std::to_string(bad) + ")";
    expectRejected(name, {kBadParam}, {"perBatch"},
                   [&] { return flashAttnSetAttentionAlibiSlopes(desc, lse_->as<float>(), bad); });
    unchanged(name);
  }
}

// Attention sinks: the setters refuse misaligned pointers (leaving the descriptor as it was), the getters a NULL
// output, and a backward refuses dSinks without sinks and dSinks overlapping another output.
TEST_F(BadInput, AttentionSinks) {
  expectRejected("GetAttentionSinks: sinks NULL", {kBadParam}, {"sinks"},
                 [&] { return flashAttnGetAttentionSinks(attn_, nullptr); });
  expectRejected("GetAttentionSinksGradient: dSinks NULL", {kBadParam}, {"dSinks"},
                 [&] { return flashAttnGetAttentionSinksGradient(attn_, nullptr); });

  fa_test::AttnDesc desc;
  const float *sinksBefore = reinterpret_cast<const float *>(std::uintptr_t(0x1000));
  float *dSinksBefore = reinterpret_cast<float *>(std::uintptr_t(0x2000));
  ASSERT_EQ(flashAttnSetAttentionSinks(desc, sinksBefore), kSuccess);
  ASSERT_EQ(flashAttnSetAttentionSinksGradient(desc, dSinksBefore), kSuccess);
  expectRejected("SetAttentionSinks: sinks at an odd address", {kBadParam}, {"sinks"},
                 [&] { return flashAttnSetAttentionSinks(desc, lseIn_->as<float>(1)); });
  expectRejected("SetAttentionSinks: sinks 2-byte aligned", {kBadParam}, {"sinks"},
                 [&] { return flashAttnSetAttentionSinks(desc, lseIn_->as<float>(2)); });
  expectRejected("SetAttentionSinksGradient: dSinks at an odd address", {kBadParam}, {"dSinks"},
                 [&] { return flashAttnSetAttentionSinksGradient(desc, lse_->as<float>(1)); });
  const float *sinksAfter = nullptr;
  float *dSinksAfter = nullptr;
  ASSERT_EQ(flashAttnGetAttentionSinks(desc, &sinksAfter), kSuccess);
  ASSERT_EQ(flashAttnGetAttentionSinksGradient(desc, &dSinksAfter), kSuccess);
  EXPECT_EQ(sinksAfter, sinksBefore) << "a rejected setter changed the sinks";
  EXPECT_EQ(dSinksAfter, dSinksBefore) << "a rejected setter changed dSinks";

  // dSinks without sinks: refused by the operation and its size query, naming dSinks.
  fa_test::AttnDesc noSinks;
  ASSERT_EQ(flashAttnSetAttentionSinksGradient(noSinks, lse_->as<float>()), kSuccess);
  BackwardCall bw = backward();
  bw.attn = noSinks;
  rejectEverywhere("backward: dSinks set without sinks", {kBadParam}, {"dSinks"}, bw, kOpAndSize);

  // dSinks overlapping dQ (and an input): an output may alias nothing.
  const Keywords overlap{"overlap", "alias"};
  fa_test::AttnDesc withSinks;
  ASSERT_EQ(flashAttnSetAttentionSinks(withSinks, lseIn_->as<float>()), kSuccess);
  bw = backward();
  bw.attn = withSinks;
  ASSERT_EQ(flashAttnSetAttentionSinksGradient(withSinks, static_cast<float *>(bw.dQ)), kSuccess);
  expectRejected("backward: dSinks inside dQ", {kBadParam}, overlap, [&] { return bw.run(); });
  ASSERT_EQ(flashAttnSetAttentionSinksGradient(withSinks, lseIn_->as<float>()), kSuccess);
  expectRejected("backward: dSinks over the sinks and the LSE input", {kBadParam}, overlap, [&] { return bw.run(); });
}

TEST_F(BadInput, DecodeArguments) {
  auto c = decode();
  for (int32_t bad : {-1, std::numeric_limits<int32_t>::min()}) {
    c.numChunks = bad;
    rejectEverywhere("decode: numChunks " + std::to_string(bad), {kBadParam}, {"numChunks", "chunks"}, c, kOpAndSize);
  }
  c = decode();
  c.seq = raggedSeq_;
  rejectEverywhere("decode: ragged seqDesc", {kBadParam}, {"ragged", "seqDesc"}, c);
}

// Past the split-KV kernels' 16 query tokens DecodeChunk runs as the forward: served on every backend, with no
// workspace of its own, dense or paged, whatever numChunks says.
TEST_F(BadInput, DecodePastSixteenQueriesIsServed) {
  auto q17 = makeDesc(kFp16, {B, H, 17, D});
  auto o17 = makeDesc(kFp16, {B, H, 17, D});
  auto lse17 = makeDesc(kFp32, {B, H, 17});
  Buffer &q = tensorBuffer("Q (17 tokens)", kFp16, {B, H, 17, D}, false);
  Buffer &o = tensorBuffer("O (17 tokens)", kFp16, {B, H, 17, D}, true);
  Buffer &lse = tensorBuffer("LSE (17 tokens)", kFp32, {B, H, 17}, true);
  for (const bool pagedCache : {false, true}) {
    DecodeCall c = pagedCache ? paged() : decode();
    c.qDesc = *q17;
    c.q = q.data();
    c.oDesc = *o17;
    c.o = o.data();
    c.lseDesc = *lse17;
    c.lse = lse.as<float>();
    const std::string name = pagedCache ? "paged decode: seqQ 17" : "decode: seqQ 17";
    for (const int32_t chunks : {0, 1, 5}) {
      c.numChunks = chunks;
      std::size_t bytes = kBytesCanary;
      EXPECT_EQ(c.size(&bytes), kSuccess) << name << ": " << fa_test::lastError();
      EXPECT_EQ(bytes, 0u) << name << ", " << chunks << " chunks: the forward needs no workspace";
      EXPECT_EQ(c.run(), kSuccess) << name << ", " << chunks << " chunks: " << fa_test::lastError();
    }
    char text[256] = {};
    EXPECT_EQ(c.support(text, sizeof text, nullptr), kSuccess) << name << ": " << fa_test::lastError();
    EXPECT_TRUE(mentions(text, "forward") || mentions(text, "fwd")) << name << ": " << text;
    ++g_totalCases;
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Sequence descriptors: setter values, and index arrays that contradict the tensors.

TEST_F(BadInput, SeqDescriptorValues) {
  fa_test::SeqDesc desc;
  const int32_t *cuQ = cuQ_->as<int32_t>(), *cuK = cuK_->as<int32_t>();
  const auto raggedUnchanged = [&](const std::string &name) {
    int64_t batch = -1;
    const int32_t *q = cuQ;
    ASSERT_EQ(flashAttnGetSeqRagged(desc, &batch, &q, nullptr, nullptr, nullptr), kSuccess);
    EXPECT_TRUE(batch == 0 && q == nullptr) << name << " changed the descriptor";
  };
  for (int64_t bad : {int64_t(0), int64_t(-1)}) {
    const std::string name = "SetSeqRagged: batch " + std::to_string(bad);
    expectRejected(name, {kBadParam}, {"batch"}, [&] { return flashAttnSetSeqRagged(desc, bad, cuQ, cuK, 5, 9); });
    raggedUnchanged(name);
  }
  expectRejected("SetSeqRagged: cuSeqlensQ NULL, cuSeqlensK not", {kBadParam}, {"cuSeqlensQ"},
                 [&] { return flashAttnSetSeqRagged(desc, B, nullptr, cuK, 5, 9); });
  expectRejected("SetSeqRagged: maxSeqlenQ 0", {kBadParam}, {"maxSeqlenQ"},
                 [&] { return flashAttnSetSeqRagged(desc, B, cuQ, cuK, 0, 9); });
  expectRejected("SetSeqRagged: maxSeqlenK -3", {kBadParam}, {"maxSeqlenK"},
                 [&] { return flashAttnSetSeqRagged(desc, B, cuQ, cuK, 5, -3); });
  raggedUnchanged("SetSeqRagged: maxSeqlen");
  expectRejected("SetSeqKvLengths: batch 0", {kBadParam}, {"batch"},
                 [&] { return flashAttnSetSeqKvLengths(desc, 0, kvLengths_->as<int32_t>()); });
  expectRejected("SetSeqPaged: maxPagesPerSeq 0", {kBadParam}, {"maxPagesPerSeq"},
                 [&] { return flashAttnSetSeqPaged(desc, B, blockTable_->as<int32_t>(), 0); });
  expectRejected("SetSeqPaged: batch -1", {kBadParam}, {"batch"},
                 [&] { return flashAttnSetSeqPaged(desc, -1, blockTable_->as<int32_t>(), PAGES_PER_SEQ); });
  int64_t batch = -1;
  ASSERT_EQ(flashAttnGetSeqPaged(desc, &batch, nullptr, nullptr), kSuccess);
  EXPECT_EQ(batch, 0) << "a rejected SetSeqPaged changed the descriptor";
  // cuSeqlensK alone may be NULL (a ragged Q over a paged cache): the setter keeps it; the operations decide.
  ASSERT_EQ(flashAttnSetSeqRagged(desc, B, cuQ, nullptr, 5, 9), kSuccess) << fa_test::lastError();
  const int32_t *gotQ = nullptr, *gotK = cuK;
  ASSERT_EQ(flashAttnGetSeqRagged(desc, &batch, &gotQ, &gotK, nullptr, nullptr), kSuccess);
  EXPECT_TRUE(batch == B && gotQ == cuQ && gotK == nullptr) << "SetSeqRagged with cuSeqlensK NULL was not kept";
}

// Checks on the sequence descriptor that need no index data, so every backend makes them.
TEST_F(BadInput, SeqDescriptorAgainstTensors) {
  fa_test::SeqDesc lengths3;
  ASSERT_EQ(flashAttnSetSeqKvLengths(lengths3, B + 1, kvLengths_->as<int32_t>()), kSuccess);
  auto d = decode();
  d.seq = lengths3;
  rejectEverywhere("decode: seqlensK for 3 sequences, batch 2", {kBadParam}, {"seqlensK", "batch"}, d);

  fa_test::SeqDesc pagedNoLengths;
  ASSERT_EQ(flashAttnSetSeqPaged(pagedNoLengths, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
  d = paged();
  d.seq = pagedNoLengths;
  rejectEverywhere("paged decode: block table without KV lengths", {kBadParam}, {"seqlensK", "lengths"}, d);

  fa_test::SeqDesc paged3;
  ASSERT_EQ(flashAttnSetSeqKvLengths(paged3, B, kvLengths_->as<int32_t>()), kSuccess);
  ASSERT_EQ(flashAttnSetSeqPaged(paged3, B + 1, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
  d = paged();
  d.seq = paged3;
  rejectEverywhere("paged decode: block table for 3 sequences, batch 2", {kBadParam}, {"block", "batch"}, d);

  // A ragged Q over a paged cache takes its keys from seqlensK and the pages: key offsets as well are a contradiction.
  fa_test::SeqDesc raggedAndPaged;
  ASSERT_EQ(flashAttnSetSeqRagged(raggedAndPaged, B, cuQ_->as<int32_t>(), cuK_->as<int32_t>(), 5, 9), kSuccess);
  ASSERT_EQ(flashAttnSetSeqKvLengths(raggedAndPaged, B, kvLengths_->as<int32_t>()), kSuccess);
  ASSERT_EQ(flashAttnSetSeqPaged(raggedAndPaged, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
  auto r = raggedPagedForward();
  r.seq = raggedAndPaged;
  rejectEverywhere("ragged paged forward: cuSeqlensK given", {kBadParam}, {"cuSeqlensK"}, r);
  // Ragged K and V without key offsets.
  fa_test::SeqDesc raggedNoKeys;
  ASSERT_EQ(flashAttnSetSeqRagged(raggedNoKeys, B, cuQ_->as<int32_t>(), nullptr, 5, 9), kSuccess);
  r = raggedForward();
  r.seq = raggedNoKeys;
  rejectEverywhere("ragged forward: cuSeqlensK NULL without a paged cache", {kBadParam}, {"cuSeqlensK"}, r);
  // The pages are [numPages, pageSize, kvHeads, headDim] under a ragged Q too.
  r = raggedPagedForward();
  r.kDesc = r.vDesc = *kRagD_;
  rejectEverywhere("ragged paged forward: K in the ragged layout", {kBadParam}, {"rank", "K"}, r);
  fa_test::SeqDesc raggedPaged3;
  ASSERT_EQ(flashAttnSetSeqRagged(raggedPaged3, B, cuQ_->as<int32_t>(), nullptr, 5, 9), kSuccess);
  ASSERT_EQ(flashAttnSetSeqKvLengths(raggedPaged3, B, kvLengths_->as<int32_t>()), kSuccess);
  ASSERT_EQ(flashAttnSetSeqPaged(raggedPaged3, B + 1, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
  r = raggedPagedForward();
  r.seq = raggedPaged3;
  rejectEverywhere("ragged paged forward: block table for 3 sequences, batch 2", {kBadParam}, {"block", "batch"}, r);
  fa_test::SeqDesc raggedPagedNoLengths;
  ASSERT_EQ(flashAttnSetSeqRagged(raggedPagedNoLengths, B, cuQ_->as<int32_t>(), nullptr, 5, 9), kSuccess);
  ASSERT_EQ(flashAttnSetSeqPaged(raggedPagedNoLengths, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
  r = raggedPagedForward();
  r.seq = raggedPagedNoLengths;
  rejectEverywhere("ragged paged forward: no KV lengths", {kBadParam}, {"seqlensK", "lengths"}, r);
  // Backward takes no paged cache, ragged Q or not.
  BackwardCall rb{handle_,       attn_,         raggedPagedSeq_, *qRagD_,    qRag_->data(),        *pagesD_,
                  kPages_->data(), *pagesD_,    vPages_->data(), *oRagD_,    oRag_->data(),        *qRagD_,
                  qRag_->data(), *lseRagD_,     lseRag_->as<float>(),        *qRagD_, dQ_->data(), *pagesD_,
                  dK_->data(),   *pagesD_,      dV_->data(),     workspacePtr(), workspaceBytes_};
  rejectEverywhere("ragged paged backward", {kBadParam, kNotSupported}, {"paged"}, rb, kOpAndSize);

  // Paged K must be [numPages, pageSize, kvHeads, headDim]: a dense cache shape puts 32 where kvHeads belongs.
  d = paged();
  d.kDesc = d.vDesc = *cacheD_;
  rejectEverywhere("paged decode: K in the dense layout", {kBadParam}, {"heads", "K"}, d);
}

// The HOST backend reads the index arrays and must refuse contradictions before writing anything. The CUDA backend
// cannot read them without a synchronisation and trusts them (the header says so), so these run on HOST only.
TEST_F(BadInput, HostIndexArrays) {
  if (!onHost()) GTEST_SKIP() << "the CUDA backend trusts index arrays (flashattn.h, sequence descriptor)";
  const auto raggedCase = [&](const std::string &name, std::vector<int32_t> cuQ, std::vector<int32_t> cuK,
                              int64_t maxQ, int64_t maxK, const Keywords &keywords) {
    Buffer &q = indexBuffer(name + " cuSeqlensQ", cuQ);
    Buffer &k = indexBuffer(name + " cuSeqlensK", cuK);
    fa_test::SeqDesc seq;
    ASSERT_EQ(flashAttnSetSeqRagged(seq, B, q.as<int32_t>(), k.as<int32_t>(), maxQ, maxK), kSuccess)
        << fa_test::lastError();
    auto c = raggedForward();
    c.seq = seq;
    rejectEverywhere("ragged forward: " + name, {kBadParam}, keywords, c, kOp);
  };
  raggedCase("cuSeqlensQ not starting at 0", {1, 3, 8}, {0, 7, 16}, 7, 9, {"cuSeqlensQ"});
  raggedCase("cuSeqlensQ decreasing", {0, 5, 3}, {0, 7, 16}, 5, 9, {"cuSeqlensQ"});
  raggedCase("cuSeqlensQ past Q's 8 tokens", {0, 3, 9}, {0, 7, 16}, 6, 9, {"cuSeqlensQ"});
  raggedCase("cuSeqlensQ negative", {0, -1, 8}, {0, 7, 16}, 9, 9, {"cuSeqlensQ"});
  raggedCase("cuSeqlensK not starting at 0", {0, 3, 8}, {2, 7, 16}, 5, 9, {"cuSeqlensK"});
  raggedCase("cuSeqlensK decreasing", {0, 3, 8}, {0, 9, 7}, 5, 9, {"cuSeqlensK"});
  raggedCase("cuSeqlensK past K's 16 tokens", {0, 3, 8}, {0, 7, 17}, 5, 10, {"cuSeqlensK"});
  raggedCase("sequence longer than maxSeqlenQ", {0, 1, 8}, {0, 7, 16}, 5, 9, {"maxSeqlenQ", "cuSeqlensQ"});
  raggedCase("sequence longer than maxSeqlenK", {0, 3, 8}, {0, 2, 16}, 5, 9, {"maxSeqlenK", "cuSeqlensK"});

  const auto lengthsCase = [&](const std::string &name, std::vector<int32_t> lengths, bool pagedCache) {
    Buffer &l = indexBuffer(name + " seqlensK", lengths);
    fa_test::SeqDesc seq;
    ASSERT_EQ(flashAttnSetSeqKvLengths(seq, B, l.as<int32_t>()), kSuccess);
    if (pagedCache) {
      ASSERT_EQ(flashAttnSetSeqPaged(seq, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
    }
    auto c = pagedCache ? paged() : decode();
    c.seq = seq;
    rejectEverywhere((pagedCache ? "paged decode: " : "decode: ") + name, {kBadParam}, {"seqlensK"}, c, kOp);
  };
  lengthsCase("seqlensK 33 past the cache's 32", {20, 33}, false);
  lengthsCase("seqlensK -1", {-1, 32}, false);
  lengthsCase("seqlensK 33 past 4 pages of 8", {33, 5}, true);

  const auto tableCase = [&](const std::string &name, std::vector<int32_t> table) {
    Buffer &t = indexBuffer(name + " blockTable", table);
    fa_test::SeqDesc seq;
    ASSERT_EQ(flashAttnSetSeqKvLengths(seq, B, kvLengths_->as<int32_t>()), kSuccess);
    ASSERT_EQ(flashAttnSetSeqPaged(seq, B, t.as<int32_t>(), PAGES_PER_SEQ), kSuccess);
    auto c = paged();
    c.seq = seq;
    rejectEverywhere("paged decode: " + name, {kBadParam}, {"blockTable", "block", "page"}, c, kOp);
  };
  tableCase("block id 8 of 8 pages", {6, 2, 8, 0, 3, 5, 1, 4});
  tableCase("block id -1 in a used slot", {6, 2, 7, 0, 3, 5, 1, -1});
  tableCase("block id 2^31-1", {6, 2, 7, 0, std::numeric_limits<int32_t>::max(), 5, 1, 4});

  // Chunked prefill (ragged Q over the pages) reads cuSeqlensQ, seqlensK and the block table.
  const auto raggedPagedCase = [&](const std::string &name, std::vector<int32_t> cuQ, std::vector<int32_t> lengths,
                                   std::vector<int32_t> table, const Keywords &keywords) {
    Buffer &q = indexBuffer(name + " cuSeqlensQ", cuQ);
    Buffer &l = indexBuffer(name + " seqlensK", lengths);
    Buffer &t = indexBuffer(name + " blockTable", table);
    fa_test::SeqDesc seq;
    ASSERT_EQ(flashAttnSetSeqRagged(seq, B, q.as<int32_t>(), nullptr, 5, 9), kSuccess) << fa_test::lastError();
    ASSERT_EQ(flashAttnSetSeqKvLengths(seq, B, l.as<int32_t>()), kSuccess);
    ASSERT_EQ(flashAttnSetSeqPaged(seq, B, t.as<int32_t>(), PAGES_PER_SEQ), kSuccess);
    auto c = raggedPagedForward();
    c.seq = seq;
    rejectEverywhere("ragged paged forward: " + name, {kBadParam}, keywords, c, kOp);
  };
  const std::vector<int32_t> table{6, 2, 7, 0, 3, 5, 1, 4};
  raggedPagedCase("cuSeqlensQ past Q's 8 tokens", {0, 3, 9}, {20, 32}, table, {"cuSeqlensQ"});
  raggedPagedCase("sequence longer than maxSeqlenQ", {0, 1, 8}, {20, 32}, table, {"maxSeqlenQ", "cuSeqlensQ"});
  raggedPagedCase("seqlensK 33 past 4 pages of 8", {0, 3, 8}, {33, 5}, table, {"seqlensK"});
  raggedPagedCase("block id 8 of 8 pages", {0, 3, 8}, {20, 32}, {6, 2, 8, 0, 3, 5, 1, 4}, {"blockTable", "page"});

  // The backward reads the same arrays.
  Buffer &badQ = indexBuffer("backward cuSeqlensQ", {0, 9, 8});
  fa_test::SeqDesc seq;
  ASSERT_EQ(flashAttnSetSeqRagged(seq, B, badQ.as<int32_t>(), cuK_->as<int32_t>(), 9, 9), kSuccess);
  // Gradients go to the dense dQ/dK/dV buffers, which are larger than the ragged tensors.
  BackwardCall bw{handle_,       attn_,          seq,           *qRagD_,    qRag_->data(),        *kRagD_,
                  kRag_->data(), *kRagD_,        vRag_->data(), *oRagD_,    oRag_->data(),        *qRagD_,
                  qRag_->data(), *lseRagD_,      lseRag_->as<float>(),      *qRagD_, dQ_->data(),  *kRagD_,
                  dK_->data(),   *kRagD_,        dV_->data(),   workspacePtr(), workspaceBytes_};
  rejectEverywhere("ragged backward: cuSeqlensQ decreasing", {kBadParam}, {"cuSeqlensQ"}, bw, kOp);
}

// ---------------------------------------------------------------------------------------------------------------------
// Holes a libFuzzer run over the HOST backend found in the validation, one test each. Where the backends differ, the
// CUDA expectation is written beside the HOST one.

// Every tensor a call reads or writes is checked for an addressable span before its dims are used: the LSE, the
// gradients and the merge's output, not only Q, K, V, O and dO. Here one dimension of 2^23 + 1 with a stride of 2^40
// puts the last element 2^63 elements out, which wrapped the overlap check's int64 extent; the run then wrote
// through the wrapped offsets. The library must refuse (BAD_PARAM: the tensor is invalid) on both backends.
TEST_F(BadInput, SpansOfEveryTensorPastInt64) {
  const int64_t many = (int64_t(1) << 23) + 1, far = int64_t(1) << 40;
  // A valid problem around the bad tensor: Q, K, V broadcast (zero strides), headDim 1, `many` query heads, and an
  // O that really holds `many` distinct elements (16 MiB).
  auto qB = makeDesc(kFp16, {1, many, 1, 1}, {0, 0, 0, 1});
  auto kvB = makeDesc(kFp16, {1, 1, 1, 1}, {0, 0, 0, 1});
  auto kvMany = makeDesc(kFp16, {1, many, 1, 1}, {0, 0, 0, 1});
  auto oMany = makeDesc(kFp16, {1, many, 1, 1});
  auto lseBroadcast = makeDesc(kFp32, {1, many, 1}, {0, 0, 1});
  auto lseHuge = makeDesc(kFp32, {1, many, 1}, {0, far, 1});
  auto gradHuge = makeDesc(kFp16, {1, many, 1, 1}, {0, far, 0, 1});
  auto kvGrad = makeDesc(kFp16, {1, 1, 1, 1});
  Buffer &big = newBuffer("O of 2^23 + 1 heads", std::size_t(many) * 2, true);
  Buffer &small = newBuffer("small output", 256, true);

  auto f = forward();
  f.qDesc = *qB;
  f.kDesc = f.vDesc = *kvB;
  f.oDesc = *oMany;
  f.o = big.data();
  f.lseDesc = *lseHuge;
  rejectEverywhere("forward: LSE [1, 2^23+1, 1] with head stride 2^40", {kBadParam}, {"LSE"}, f, kOpAndSize);

  auto d = decode();
  d.seq = nullptr;
  d.qDesc = *qB;
  d.kDesc = d.vDesc = *kvB;
  d.oDesc = *oMany;
  d.o = big.data();
  d.lseDesc = *lseHuge;
  rejectEverywhere("decode: LSE [1, 2^23+1, 1] with head stride 2^40", {kBadParam}, {"LSE"}, d, kOpAndSize);

  auto partialO = makeDesc(kFp32, {2, 1, many, 1, 1}, {0, 0, 0, 0, 1});
  auto partialLse = makeDesc(kFp32, {2, 1, many, 1}, {0, 0, 0, 1});
  auto m = merge();
  m.partialODesc = *partialO;
  m.partialLseDesc = *partialLse;
  m.oDesc = *oMany;
  m.o = big.data();
  m.lseDesc = *lseHuge;
  rejectEverywhere("merge: LSE [1, 2^23+1, 1] with head stride 2^40", {kBadParam}, {"LSE"}, m, kOpAndSize);
  m.lseDesc = nullptr;
  m.lse = nullptr;
  auto oHuge = makeDesc(kFp16, {1, many, 1, 1}, {0, far, 0, 1});
  m.oDesc = *oHuge;
  rejectEverywhere("merge: O [1, 2^23+1, 1, 1] with head stride 2^40", {kBadParam}, {"O"}, m, kOpAndSize);

  // Backward: the LSE it reads, then each gradient it writes.
  auto b = backward();
  b.qDesc = b.dODesc = *qB;
  b.kDesc = b.vDesc = *kvB;
  b.oDesc = *qB;
  b.lseDesc = *lseHuge;
  b.dQDesc = *oMany;
  b.dQ = big.data();
  b.dKDesc = b.dVDesc = *kvGrad;
  b.dK = small.data();
  b.dV = small.data(64);
  rejectEverywhere("backward: LSE [1, 2^23+1, 1] with head stride 2^40", {kBadParam}, {"LSE"}, b, kOpAndSize);
  b.lseDesc = *lseBroadcast;
  b.dQDesc = *gradHuge;
  rejectEverywhere("backward: dQ [1, 2^23+1, 1, 1] with head stride 2^40", {kBadParam}, {"dQ"}, b, kOp);
  b.dQDesc = *oMany;
  b.kDesc = b.vDesc = *kvMany;
  b.dKDesc = *gradHuge;
  b.dVDesc = *oMany;
  b.dK = small.data();
  b.dV = small.data(64);  // never reached: dK is refused first
  rejectEverywhere("backward: dK [1, 2^23+1, 1, 1] with head stride 2^40", {kBadParam}, {"dK"}, b, kOp);
  b.dKDesc = *oMany;
  b.dVDesc = *gradHuge;
  rejectEverywhere("backward: dV [1, 2^23+1, 1, 1] with head stride 2^40", {kBadParam}, {"dV"}, b, kOp);
}

// CheckSupport makes stand-ins for the descriptors it is not given (Backward's LSE, the merge's partial LSE) from the
// dims of the others; with Q [1, 2^40, 2^40, 1] their packed strides are 2^80 elements. The product must be checked
// (the wrapped value happened to give the right status; UBSan reports the overflow).
TEST_F(BadInput, CheckSupportStandInsPastInt64) {
  const int64_t huge = int64_t(1) << 40;
  auto q = makeDesc(kFp16, {1, huge, huge, 1}, {0, 0, 0, 1});
  auto kv = makeDesc(kFp16, {1, 1, 1, 1}, {0, 0, 0, 1});
  auto bw = backward();
  bw.qDesc = bw.oDesc = *q;
  bw.kDesc = bw.vDesc = *kv;
  rejectEverywhere("CheckSupport(BACKWARD): Q [1, 2^40, 2^40, 1], stand-in LSE of 2^80 elements", {kBadParam},
                   {"Q", "LSE"}, bw, kSupport);
  auto partialO = makeDesc(kFp32, {2, 1, huge, huge, 1}, {0, 0, 0, 0, 1});
  auto m = merge();
  m.partialODesc = *partialO;
  m.oDesc = *q;
  rejectEverywhere("CheckSupport(MERGE_STATES): partialO [2, 1, 2^40, 2^40, 1]", {kBadParam}, {"O", "partialO"}, m,
                   kSupport);
}

// The CUDA backward planner counted its grid as key blocks x kvHeads x batch in int64. With K broadcast (zero
// strides) no tensor's span bounds that product in the size query and CheckSupport, whose dK is a stand-in with K's
// layout: 2^25 key blocks x 2^29 x 2^29 wrapped and a negative count passed the grid limit. CUDA: NOT_SUPPORTED (the
// grid is past 2^31 blocks). HOST: served (its workspace, 2^61 bytes of D rows, is addressable; nothing runs here).
TEST_F(BadInput, BackwardGridCountPastInt64) {
  const int64_t n = int64_t(1) << 29, keys = std::numeric_limits<int32_t>::max() - 4096;
  auto q = makeDesc(kFp16, {n, n, 1, 8}, {0, 0, 0, 1});
  auto kv = makeDesc(kFp16, {n, n, keys, 8}, {0, 0, 0, 1});
  auto o = makeDesc(kFp16, {n, n, 1, 8});
  auto bw = backward();
  bw.qDesc = bw.dODesc = *q;
  bw.kDesc = bw.vDesc = *kv;
  bw.oDesc = *o;
  if (onCuda()) {
    rejectEverywhere("CheckSupport(BACKWARD): K broadcast over 2^29 x 2^29 heads of 2^31 keys", {kNotSupported},
                     {"batch", "heads", "grid", "seqK"}, bw, kSupport);
    return;
  }
  EXPECT_EQ(bw.support(nullptr, 0, nullptr), kSuccess) << fa_test::lastError();
  ++g_totalCases;
}

// DecodeChunk's chunk bounds sk * c / chunks reach 2^40 * 2^23 = 2^63 for the last chunk of 2^23 over a 2^40-key
// cache, which wrapped: that chunk's range came out empty (or, for other counts, 2^41 keys long, a run that never
// returns). A window keeps only the last key visible, so the run is short, and the answer is known: that key's
// value and logit. HOST: runs and matches Forward. CUDA: refuses (headDim 1, and its decode indexes keys in 32 bits).
TEST_F(BadInput, DecodeChunkBoundsPastInt64) {
  const int64_t keys = int64_t(1) << 40;
  const int32_t chunks = int32_t(1) << 23;
  auto q1 = makeDesc(kFp32, {1, 1, 1, 1});
  auto cache = makeDesc(kFp32, {1, 1, keys, 1}, {0, 0, 0, 1});
  auto lse1 = makeDesc(kFp32, {1, 1, 1});
  Buffer &q = newBuffer("Q (one element)", 4, false);
  Buffer &k = newBuffer("K (one element, broadcast)", 4, false);
  Buffer &v = newBuffer("V (one element, broadcast)", 4, false);
  const float qv = 1.0f, kv = 0.5f, vv = 0.75f;
  q.upload(&qv, 4);
  k.upload(&kv, 4);
  v.upload(&vv, 4);
  Buffer &o = newBuffer("O (one element)", 4, true);
  Buffer &lse = newBuffer("LSE (one element)", 4, true);
  fa_test::AttnDesc lastKeyOnly;
  ASSERT_EQ(flashAttnSetAttentionWindow(lastKeyOnly, 0, 0), kSuccess);
  ASSERT_EQ(flashAttnSetAttentionScale(lastKeyOnly, 1.0f), kSuccess);
  DecodeCall c{handle_, lastKeyOnly, nullptr, *q1,        q.data(),           *cache, k.data(), *cache,
               v.data(), *q1,        o.data(), *lse1, lse.as<float>(), chunks, nullptr,  0};
  std::size_t need = kBytesCanary;
  const flashAttnStatus_t sized = c.size(&need);
  if (onCuda()) {
    EXPECT_EQ(sized, kNotSupported) << fa_test::lastError();
    EXPECT_EQ(need, kBytesCanary);
    return;
  }
  ASSERT_EQ(sized, kSuccess) << fa_test::lastError();
  Buffer &ws = newBuffer("decode workspace", need, true);
  c.workspace = ws.data();
  c.workspaceBytes = need;
  ASSERT_EQ(c.run(), kSuccess) << fa_test::lastError();
  float gotO = 0, gotLse = 0;
  memory().download(&gotO, o.data(), 4);
  memory().download(&gotLse, lse.data(), 4);
  EXPECT_EQ(gotO, vv) << "the last chunk's only visible key was lost";
  EXPECT_EQ(gotLse, qv * kv) << "one visible key: LSE is its logit";
  EXPECT_LT(need, std::size_t(1) << 20) << "the HOST decode workspace is bounded whatever the chunk count";
}

// Forward and DecodeChunk at extreme logits: two keys that matter, at the two ends of a 256-key cache whose other
// keys have dot products of -1 (weight exactly 0 at these scales), over two chunks, so that each chunk holds one of
// them and the decode's merge carries the whole answer. At scale 1e6 the two logits are ~1e6 apart by less than one,
// where an FP32 partial LSE (ulp 0.0625) moves the weights by percent; at FLT_MAX they pass FLT_MAX, where FP32
// partial states overflow. The HOST decode folds its chunks in double with maxima and sums apart, so it agrees with
// Forward bitwise and with the float64 oracle. CUDA: Forward and DecodeChunk both refuse scale FLT_MAX (scale *
// log2 e is infinite in FP32); at 1e6 both run, and the GPU suite (test_gpu_decode) checks them against the oracle
// in every merge mode.
struct ExtremeLogits {
  const char *name;
  float scale;
  double q1, k2;  // q = (1, q1, 0...), k_first = (kScale, 0...), k_last = (kScale, k2, 0...), fillers (-1, 0...)
  double kScale;
};
constexpr int64_t kExtremeKeys = 256;

TEST_F(BadInput, DecodeAgreesWithForwardAtExtremeLogits) {
  constexpr int64_t kD = 64, kN = kExtremeKeys;
  const ExtremeLogits cases[] = {
      {"scale 1e6, logits 1e6 and 1e6 + 0.95", 1e6f, 1.0 / 1024, 1.0 / 1024, 1.0},
      {"scale FLT_MAX, logits 2 FLT_MAX twice (past FP32)", std::numeric_limits<float>::max(), 0.0, 0.0, 2.0},
      {"scale FLT_MAX, logits FLT_MAX and FLT_MAX (1 + 2^-20)", std::numeric_limits<float>::max(), 1.0 / 1024,
       1.0 / 1024, 1.0},
  };
  for (const flashAttnDataType_t dtype : {kFp32, kFp16}) {
    if (onCuda() && (!fa_test::partBuiltAtLeast(fa_test::Family::Forward, dtype, kD) ||
                     !fa_test::partBuiltAtLeast(fa_test::Family::Decode, dtype, kD)))
      continue;
    auto qd = makeDesc(dtype, {1, 1, 1, kD});
    auto kvd = makeDesc(dtype, {1, 1, kN, kD});
    auto ld = makeDesc(kFp32, {1, 1, 1});
    const std::size_t e = fa_test::elementSize(dtype);
    for (const ExtremeLogits &cs : cases) {
      const std::string name = std::string(fa_test::typeName(dtype)) + ", " + cs.name;
      std::vector<double> qv(kD, 0.0), kv(kN * kD, 0.0), vv(kN * kD, 1.0);
      qv[0] = 1.0;
      qv[1] = cs.q1;
      for (int64_t j = 0; j < kN; ++j) kv[size_t(j * kD)] = -1.0;
      kv[0] = kv[size_t((kN - 1) * kD)] = cs.kScale;
      kv[size_t((kN - 1) * kD + 1)] = cs.k2;
      for (int64_t d = 0; d < kD; ++d) vv[size_t(d)] = 5.0, vv[size_t((kN - 1) * kD + d)] = 3.0;
      std::vector<uint8_t> qb(kD * e), kb(kN * kD * e), vb(kN * kD * e);
      for (int64_t i = 0; i < kD; ++i) fa_test::storeElement(qb.data(), dtype, i, qv[size_t(i)]);
      for (int64_t i = 0; i < kN * kD; ++i) {
        fa_test::storeElement(kb.data(), dtype, i, kv[size_t(i)]);
        fa_test::storeElement(vb.data(), dtype, i, vv[size_t(i)]);
      }
      Buffer &q = newBuffer(name + " Q", qb.size(), false);
      Buffer &k = newBuffer(name + " K", kb.size(), false);
      Buffer &v = newBuffer(name + " V", vb.size(), false);
      q.upload(qb.data(), qb.size());
      k.upload(kb.data(), kb.size());
      v.upload(vb.data(), vb.size());
      Buffer &oF = newBuffer(name + " O forward", kD * e, true), &oD = newBuffer(name + " O decode", kD * e, true);
      Buffer &lF = newBuffer(name + " LSE forward", 4, true), &lD = newBuffer(name + " LSE decode", 4, true);
      fa_test::AttnDesc attn;
      ASSERT_EQ(flashAttnSetAttentionScale(attn, cs.scale), kSuccess);
      ForwardCall f{handle_, attn, nullptr, *qd, q.data(), *kvd, k.data(), *kvd, v.data(), *qd, oF.data(), *ld,
                    lF.as<float>(), workspacePtr(), workspaceBytes_};
      DecodeCall dc{handle_, attn,     nullptr, *qd, q.data(),         *kvd, k.data(),      *kvd,
                    v.data(), *qd,     oD.data(), *ld, lD.as<float>(), 2,    workspacePtr(), workspaceBytes_};
      const bool pastFp32 = cs.scale > 1e30f;
      if (onCuda()) {
        if (pastFp32) {
          rejectEverywhere("forward: " + name, {kNotSupported}, {"scale"}, f);
          rejectEverywhere("decode: " + name, {kNotSupported}, {"scale"}, dc);
        }
        continue;  // scale 1e6: tests/gpu/test_gpu_decode.cpp
      }
      std::size_t need = 0;
      ASSERT_EQ(dc.size(&need), kSuccess) << name << ": " << fa_test::lastError();
      ASSERT_LE(need, workspaceBytes_);
      ASSERT_EQ(f.run(), kSuccess) << name << ": " << fa_test::lastError();
      ASSERT_EQ(dc.run(), kSuccess) << name << ": " << fa_test::lastError();
      std::vector<uint8_t> ofb(kD * e), odb(kD * e);
      float lf = 0, ldv = 0;
      memory().download(ofb.data(), oF.data(), ofb.size());
      memory().download(odb.data(), oD.data(), odb.size());
      memory().download(&lf, lF.data(), 4);
      memory().download(&ldv, lD.data(), 4);
      // The float64 oracle of the inputs as stored.
      fa_ref::Problem rp;
      rp.headDim = rp.headDimV = kD;
      rp.maxSq = 1;
      rp.maxSk = kN;
      rp.scale = double(cs.scale);
      std::vector<double> qs(kD), ks(kN * kD), vs(kN * kD), refO, refLse;
      for (int64_t i = 0; i < kD; ++i) qs[size_t(i)] = fa_test::loadElement(qb.data(), dtype, i);
      for (int64_t i = 0; i < kN * kD; ++i) {
        ks[size_t(i)] = fa_test::loadElement(kb.data(), dtype, i);
        vs[size_t(i)] = fa_test::loadElement(vb.data(), dtype, i);
      }
      fa_ref::forward(rp, qs, ks, vs, refO, refLse);
      std::vector<double> outF(kD), outD(kD);
      for (int64_t i = 0; i < kD; ++i) {
        outF[size_t(i)] = fa_test::loadElement(ofb.data(), dtype, i);
        outD[size_t(i)] = fa_test::loadElement(odb.data(), dtype, i);
      }
      const double tol = fa_ref::normTolerance(fa_test::roundingOf(dtype));
      const fa_ref::Gate gateF = fa_ref::checkGates(outF, refO, refO, 2.0, tol);
      const fa_ref::Gate gateD = fa_ref::checkGates(outD, refO, refO, 2.0, tol);
      // The relative gate's low-precision variant rounds Q.K to the storage type, which at these scales moves a
      // logit by thousands; the normwise gate, which bounds the error outright, is the one that can fail here.
      EXPECT_TRUE(gateF.finite && gateF.normwise <= tol) << name << ": forward " << gateF.describe();
      EXPECT_TRUE(gateD.finite && gateD.normwise <= tol) << name << ": decode " << gateD.describe();
      EXPECT_EQ(odb, ofb) << name << ": decode and forward O differ (forward O[0] = " << outF[0]
                          << ", decode O[0] = " << outD[0] << ", oracle " << refO[0] << ")";
      const double refL = refLse[0];
      EXPECT_EQ(ldv, lf) << name << ": decode and forward LSE differ";
      if (std::isfinite(double(float(refL)))) {
        // The LSE is stored in FP32, whose rounding at |LSE| ~ 1e6 (half an ulp: 0.03) is above the 1e-4 gate.
        const double lseTol = std::max(fa_test::lseTolerance(dtype, refLse), std::fabs(refL) * 0x1p-24);
        EXPECT_LE(std::fabs(double(lf) - refL), lseTol) << name << ": forward LSE " << lf << ", oracle " << refL;
        EXPECT_LE(std::fabs(double(ldv) - refL), lseTol) << name << ": decode LSE " << ldv << ", oracle " << refL;
      } else {
        // Past FLT_MAX the LSE's FP32 value is +inf: both must say so (not NaN, not the -inf of an empty row).
        EXPECT_EQ(lf, std::numeric_limits<float>::infinity()) << name << ": forward LSE";
        EXPECT_EQ(ldv, std::numeric_limits<float>::infinity()) << name << ": decode LSE";
      }
    }
  }
}

// Inputs and index arrays inside the workspace: the operation uses its workspace as scratch from its first phase on,
// so a block table, a KV-length array, a cu_seqlens array or an input tensor placed there is overwritten before it
// is read (the run crashed reading a block table its partial states had overwritten). Refused on both backends: the
// workspace must overlap nothing the call reads or writes. An output overlapping an index array is the same hazard.
TEST_F(BadInput, WorkspaceOverlappingInputsAndIndexArrays) {
  std::size_t need = 0;
  ASSERT_EQ(paged().size(&need), kSuccess) << fa_test::lastError();
  if (need == 0) GTEST_SKIP() << "the paged decode needs no workspace on " << g_target.name;
  // An input buffer (not re-armed with the canary, so the table stays valid) that holds the workspace and, inside
  // it, a copy of the block table or of the KV lengths.
  const std::vector<int32_t> table{6, 2, 7, 0, 3, 5, 1, 4}, lengths{20, 32};
  Buffer &scratch = newBuffer("workspace holding an index array", need + 512, false);
  const std::size_t at = (need / 2) & ~std::size_t(255);
  {
    std::vector<uint8_t> bytes(need + 512, 0);
    std::memcpy(bytes.data() + at, table.data(), table.size() * 4);
    std::memcpy(bytes.data() + at + 64, lengths.data(), lengths.size() * 4);
    scratch.upload(bytes.data(), bytes.size());
  }
  fa_test::SeqDesc tableInWs, lengthsInWs;
  ASSERT_EQ(flashAttnSetSeqKvLengths(tableInWs, B, kvLengths_->as<int32_t>()), kSuccess);
  ASSERT_EQ(flashAttnSetSeqPaged(tableInWs, B, scratch.as<int32_t>(at), PAGES_PER_SEQ), kSuccess);
  ASSERT_EQ(flashAttnSetSeqKvLengths(lengthsInWs, B, scratch.as<int32_t>(at + 64)), kSuccess);
  ASSERT_EQ(flashAttnSetSeqPaged(lengthsInWs, B, blockTable_->as<int32_t>(), PAGES_PER_SEQ), kSuccess);
  auto d = paged();
  d.seq = tableInWs;
  d.workspace = scratch.data();
  d.workspaceBytes = need;
  expectRejected("paged decode: block table inside the workspace", {kBadParam}, {"workspace"}, [&] { return d.run(); });
  d.seq = lengthsInWs;
  expectRejected("paged decode: seqlensK inside the workspace", {kBadParam}, {"workspace"}, [&] { return d.run(); });
  // K inside the workspace (an input tensor; its bytes are the scratch buffer's, any values).
  d = paged();
  d.k = scratch.data(at);
  d.workspace = scratch.data();
  d.workspaceBytes = need;
  expectRejected("paged decode: K inside the workspace", {kBadParam}, {"workspace"}, [&] { return d.run(); });
  // Past the bytes the plan uses the caller's allocation is the caller's: a table there is fine.
  d = paged();
  fa_test::SeqDesc tableAfter;
  std::vector<uint8_t> after(table.size() * 4);
  std::memcpy(after.data(), table.data(), after.size());
  Buffer &tail = newBuffer("workspace with the block table after its used bytes", need + 256, false);
  memory().upload(tail.data(need), after.data(), after.size());
  ASSERT_EQ(flashAttnSetSeqKvLengths(tableAfter, B, kvLengths_->as<int32_t>()), kSuccess);
  ASSERT_EQ(flashAttnSetSeqPaged(tableAfter, B, tail.as<int32_t>(need), PAGES_PER_SEQ), kSuccess);
  d.seq = tableAfter;
  d.workspace = tail.data();
  d.workspaceBytes = need;
  EXPECT_EQ(d.run(), kSuccess) << "a block table after the workspace's used bytes: " << fa_test::lastError();
  // An output overlapping an index array: O written over the KV lengths it is computed from.
  Buffer &shared = newBuffer("O holding the KV lengths", std::size_t(B * H * DEC_SQ * D) * 2 + 256, false);
  memory().upload(shared.data(), lengths.data(), lengths.size() * 4);
  fa_test::SeqDesc lengthsInO;
  ASSERT_EQ(flashAttnSetSeqKvLengths(lengthsInO, B, shared.as<int32_t>()), kSuccess);
  auto dd = decode();
  dd.seq = lengthsInO;
  dd.o = shared.data();
  expectRejected("decode: O over its seqlensK", {kBadParam}, {"seqlensK", "O"}, [&] { return dd.run(); });
  // The backward's workspace (HOST: the D = dO . O rows; CUDA: its accumulators) over the ragged cu_seqlens.
  std::size_t backwardNeed = 0;
  BackwardCall rb{handle_,       attn_,         raggedSeq_,    *qRagD_,    qRag_->data(),        *kRagD_,
                  kRag_->data(), *kRagD_,       vRag_->data(), *oRagD_,    oRag_->data(),        *qRagD_,
                  qRag_->data(), *lseRagD_,     lseRag_->as<float>(),      *qRagD_, dQ_->data(), *kRagD_,
                  dK_->data(),   *kRagD_,       dV_->data(),   workspacePtr(), workspaceBytes_};
  if (rb.size(&backwardNeed) == kSuccess && backwardNeed > 0) {
    Buffer &bws = newBuffer("backward workspace holding cuSeqlensQ", backwardNeed + 256, false);
    const std::vector<int32_t> cu{0, 3, 8};
    memory().upload(bws.data(), cu.data(), cu.size() * 4);
    memory().upload(bws.data(256), cu.data(), cu.size() * 4);
    fa_test::SeqDesc cuInWs;
    ASSERT_EQ(flashAttnSetSeqRagged(cuInWs, B, bws.as<int32_t>(), cuK_->as<int32_t>(), 5, 9), kSuccess);
    rb.seq = cuInWs;
    rb.workspace = bws.data();
    rb.workspaceBytes = backwardNeed;
    expectRejected("ragged backward: cuSeqlensQ inside the workspace", {kBadParam}, {"workspace"},
                   [&] { return rb.run(); });
  }
}

// maxSeqlenQ/K only bound a ragged batch's lengths; the HOST backend sized its loops by them, so three sequences of
// ten tokens under maxSeqlenQ = 2^31 - 1 made ~10^8 empty work items (78 s). Work must follow the lengths present:
// the calls finish in well under a second and match the same batch with tight bounds. CUDA: the bounds size its
// launch (the header says so), and 2^31 - 1 passes its 32-bit row limit: NOT_SUPPORTED.
TEST_F(BadInput, RaggedBoundsFarAboveTheLengths) {
  const int64_t bound = std::numeric_limits<int32_t>::max();
  const std::vector<int32_t> cu{0, 10, 20, 30};
  Buffer &cuQ = indexBuffer("cuSeqlensQ 3 x 10", cu);
  Buffer &cuK = indexBuffer("cuSeqlensK 3 x 10", cu);
  auto qd = makeDesc(kFp16, {30, H, D});
  auto kd = makeDesc(kFp16, {30, KVH, D});
  auto ld = makeDesc(kFp32, {30, H});
  Buffer &q = tensorBuffer("Q (3 x 10 tokens)", kFp16, {30, H, D}, false);
  Buffer &k = tensorBuffer("K (3 x 10 tokens)", kFp16, {30, KVH, D}, false);
  Buffer &v = tensorBuffer("V (3 x 10 tokens)", kFp16, {30, KVH, D}, false);
  Buffer &o = tensorBuffer("O (3 x 10 tokens)", kFp16, {30, H, D}, true);
  Buffer &lse = tensorBuffer("LSE (3 x 10 tokens)", kFp32, {30, H}, true);
  Buffer &oTight = tensorBuffer("O (tight bounds)", kFp16, {30, H, D}, true);
  Buffer &lseTight = tensorBuffer("LSE (tight bounds)", kFp32, {30, H}, true);
  fa_test::SeqDesc loose, tight;
  ASSERT_EQ(flashAttnSetSeqRagged(loose, 3, cuQ.as<int32_t>(), cuK.as<int32_t>(), bound, bound), kSuccess);
  ASSERT_EQ(flashAttnSetSeqRagged(tight, 3, cuQ.as<int32_t>(), cuK.as<int32_t>(), 10, 10), kSuccess);
  ForwardCall f{handle_, attn_, loose, *qd, q.data(), *kd, k.data(), *kd, v.data(), *qd, o.data(), *ld,
                lse.as<float>(), workspacePtr(), workspaceBytes_};
  if (onCuda()) {
    rejectEverywhere("ragged forward: maxSeqlenQ/K 2^31 - 1 over 3 x 10 tokens", {kNotSupported},
                     {"seqQ", "seqK", "maxSeqlen"}, f);
    return;
  }
  const auto timed = [](const std::function<flashAttnStatus_t()> &call, double *seconds) {
    const auto start = std::chrono::steady_clock::now();
    const flashAttnStatus_t s = call();
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return s;
  };
  double seconds = 0;
  ASSERT_EQ(timed([&] { return f.run(); }, &seconds), kSuccess) << fa_test::lastError();
  EXPECT_LT(seconds, 5.0) << "forward sized by maxSeqlenQ/K instead of the lengths present";
  ForwardCall ft = f;
  ft.seq = tight;
  ft.o = oTight.data();
  ft.lse = lseTight.as<float>();
  ASSERT_EQ(ft.run(), kSuccess) << fa_test::lastError();
  EXPECT_EQ(o.snapshot(), oTight.snapshot()) << "the bounds changed the result";
  EXPECT_EQ(lse.snapshot(), lseTight.snapshot()) << "the bounds changed the LSE";

  Buffer &dQ = tensorBuffer("dQ (3 x 10 tokens)", kFp16, {30, H, D}, true);
  Buffer &dK = tensorBuffer("dK (3 x 10 tokens)", kFp16, {30, KVH, D}, true);
  Buffer &dV = tensorBuffer("dV (3 x 10 tokens)", kFp16, {30, KVH, D}, true);
  BackwardCall bw{handle_,  attn_,    loose,         *qd,      q.data(),  *kd, k.data(), *kd,
                  v.data(), *qd,      o.data(),      *qd,      q.data(),  *ld, lse.as<float>(),
                  *qd,      dQ.data(), *kd,          dK.data(), *kd,      dV.data(), nullptr, 0};
  std::size_t need = 0;
  ASSERT_EQ(bw.size(&need), kSuccess) << fa_test::lastError();
  Buffer &ws = newBuffer("backward workspace", need, true);
  bw.workspace = ws.data();
  bw.workspaceBytes = need;
  ASSERT_EQ(timed([&] { return bw.run(); }, &seconds), kSuccess) << fa_test::lastError();
  EXPECT_LT(seconds, 5.0) << "backward sized by maxSeqlenQ/K instead of the lengths present";
}

// HOST operations allocate no memory per call (docs/semantics.md, Workspace): scratch that grows with the problem
// lives in the workspace, per-thread scratch is kept for the thread's next call, and the pool's jobs sit on the
// caller's stack. Once warmed up (the pool's threads started, each thread's scratch sized), a call makes no heap
// allocation at all; the HOST backend used to make 4 to 49. One thread makes the count exact: which pool threads join
// a call, and so whose scratch is first used in it, is up to the scheduler. CUDA: the planners build their
// description text on the host per call; its operations allocate no device memory (the GPU suite's graph-capture
// tests would fail otherwise).
TEST_F(BadInput, HostOperationsAllocateNothingPerCall) {
  if (!onHost()) GTEST_SKIP() << "CUDA operations allocate no device memory (graph capture checks it in tests/gpu)";
  const char *before = std::getenv("FLASHATTN_HOST_THREADS");
  const std::string saved = before ? before : "";
  setenv("FLASHATTN_HOST_THREADS", "1", 1);
  std::size_t backwardBytes = 0;
  ASSERT_EQ(backward().size(&backwardBytes), kSuccess);
  ASSERT_LE(backwardBytes, workspaceBytes_);
  BackwardCall raggedBackward{handle_,       attn_,         raggedSeq_,    *qRagD_,    qRag_->data(),        *kRagD_,
                              kRag_->data(), *kRagD_,       vRag_->data(), *oRagD_,    oRag_->data(),        *qRagD_,
                              qRag_->data(), *lseRagD_,     lseRag_->as<float>(),      *qRagD_, dQ_->data(), *kRagD_,
                              dK_->data(),   *kRagD_,       dV_->data(),   workspacePtr(), workspaceBytes_};
  const std::vector<std::pair<std::string, std::function<flashAttnStatus_t()>>> calls = {
      {"forward", [&] { return forward().run(); }},
      {"ragged forward", [&] { return raggedForward().run(); }},
      {"backward", [&] { return backward().run(); }},
      {"ragged backward", [&] { return raggedBackward.run(); }},
      {"decode", [&] { return decode().run(); }},
      {"paged decode", [&] { return paged().run(); }},
      {"merge", [&] { return merge().run(); }},
      {"forward size query", [&] {
         std::size_t bytes = 0;
         return forward().size(&bytes);
       }},
  };
  for (const auto &[name, call] : calls) {
    for (int warm = 0; warm < 2; ++warm) ASSERT_EQ(call(), kSuccess) << name << ": " << fa_test::lastError();
    startCountingAllocations();
    const flashAttnStatus_t status = call();
    const long allocations = stopCountingAllocations();
    EXPECT_EQ(status, kSuccess) << name << ": " << fa_test::lastError();
    EXPECT_EQ(allocations, 0) << name << " allocated on the heap " << allocations << " times in a warm call";
    ++g_totalCases;
  }
  if (before)
    setenv("FLASHATTN_HOST_THREADS", saved.c_str(), 1);
  else
    unsetenv("FLASHATTN_HOST_THREADS");
}

// numChunks is any int32: 2^31 - 1 chunks over a 32-key cache leave all but 32 chunks empty. The HOST decode visited
// every chunk (minutes of empty iterations); its work must follow the keys (each chunk then holds at most one). The
// result equals the two-chunk decode's up to rounding. Both backends run it (the CUDA planner caps chunks at key tiles).
TEST_F(BadInput, DecodeChunkCountFarAboveTheKeys) {
  auto c = decode();
  Buffer &oMany = tensorBuffer("O (2^31 - 1 chunks)", kFp16, {B, H, DEC_SQ, D}, true);
  Buffer &lseMany = tensorBuffer("LSE (2^31 - 1 chunks)", kFp32, {B, H, DEC_SQ}, true);
  c.o = oMany.data();
  c.lse = lseMany.as<float>();
  c.numChunks = std::numeric_limits<int32_t>::max();
  std::size_t need = 0;
  ASSERT_EQ(c.size(&need), kSuccess) << fa_test::lastError();
  Buffer &ws = newBuffer("workspace (2^31 - 1 chunks)", need, true);
  c.workspace = ws.data();
  c.workspaceBytes = need;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(c.run(), kSuccess) << fa_test::lastError();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0) << "the decode's work followed numChunks instead of the keys";
  ASSERT_EQ(decode().run(), kSuccess) << fa_test::lastError();
  // The same attention split two ways: equal up to the rounding of the merge and of FP16 storage.
  const std::vector<uint8_t> many = oMany.snapshot(), two = oDec_->snapshot();
  for (int64_t i = 0; i < B * H * DEC_SQ * D; ++i) {
    const double a = fa_test::loadElement(many.data(), kFp16, i), b = fa_test::loadElement(two.data(), kFp16, i);
    ASSERT_LE(std::fabs(a - b), 2e-3 * (1.0 + std::fabs(b))) << "O element " << i;
  }
  ++g_totalCases;
}

// SetStream on a HOST handle: one rule on both backends, the one the header states. The value set is kept and
// returned by GetStream (the HOST backend never uses it), so code written for either backend may set its stream
// unconditionally. (The HOST backend accepted 0x1234 and then returned NULL.)
TEST_F(BadInput, StreamIsKeptAndReturned) {
  CUstream_st *const made = reinterpret_cast<CUstream_st *>(uintptr_t(0x1234));
  CUstream_st *got = nullptr;
  if (onCuda()) {
    // A CUDA handle would queue work on the value: set and read back only, then restore the default stream.
    ASSERT_EQ(flashAttnSetStream(handle_, made), kSuccess) << fa_test::lastError();
    EXPECT_EQ(flashAttnGetStream(handle_, &got), kSuccess);
    EXPECT_EQ(got, made);
    ASSERT_EQ(flashAttnSetStream(handle_, nullptr), kSuccess);
    return;
  }
  ASSERT_EQ(flashAttnSetStream(handle_, made), kSuccess) << fa_test::lastError();
  ASSERT_EQ(flashAttnGetStream(handle_, &got), kSuccess) << fa_test::lastError();
  EXPECT_EQ(got, made) << "GetStream must return what SetStream kept";
  EXPECT_EQ(forward().run(), kSuccess) << "a HOST handle never uses the stream: " << fa_test::lastError();
  ASSERT_EQ(flashAttnSetStream(handle_, nullptr), kSuccess);
  ASSERT_EQ(flashAttnGetStream(handle_, &got), kSuccess);
  EXPECT_EQ(got, nullptr);
}

}  // namespace

void setTarget(const Target &target) { g_target = target; }

int printCaseCount() {
  for (const auto &[test, count] : g_casesPerTest)
    if (count > 0) std::printf("  %-36s %4d cases\n", test.c_str(), count);
  std::printf("bad-input catalogue on %s: %d cases checked\n", g_target.name, g_totalCases);
  return g_totalCases;
}

}  // namespace fa_bad
