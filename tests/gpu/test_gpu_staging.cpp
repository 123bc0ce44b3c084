// SPDX-License-Identifier: BSD-3-Clause
// The staging copies (src/cuda/staging): stageIn moves every staged input from the caller's strides into its packed
// workspace slot, stageOut moves every staged output back, bitwise. Sources hold random bit patterns (NaN payloads
// included); destinations start as 0xFF bytes (NaN) so a missed element fails, and every byte a copy must not touch
// (gaps between strided rows, rows the kernels never read, the tail past the last slot) is checked to still be 0xFF.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/staging/staging.hpp"
#include "gpu_harness.hpp"

namespace {

using flashattn::AttnBuffers;
using flashattn::AttnProblem;
using flashattn::DType;
using flashattn::Layout;
using flashattn::Op;
using flashattn::cuda::kAllStagedRoom;
using flashattn::cuda::kNoStagedRoom;
using flashattn::cuda::kStagedCount;
using flashattn::cuda::planStaging;
using flashattn::cuda::Staged;
using flashattn::cuda::stagedName;
using flashattn::cuda::StagingPlan;
using fa_test::DeviceBuffer;

constexpr DType kTypes[] = {DType::BF16, DType::FP16, DType::FP32};
const char *typeName(DType t) { return t == DType::BF16 ? "bf16" : t == DType::FP16 ? "fp16" : "fp32"; }

bool isKeySide(Staged t) { return t == Staged::K || t == Staged::V || t == Staged::dK || t == Staged::dV; }
bool isInput(Op op, Staged t) { return op == Op::Backward ? int(t) <= int(Staged::dO) : t != Staged::O; }

// A test problem: the AttnProblem plus what the copy must be checked against, independent of the plan.
struct Case {
  AttnProblem p;
  int64_t offset[kStagedCount] = {};  // elements between the allocation and the tensor's base pointer
  std::vector<int32_t> cuQ, cuK, seqlensK;
};

Case backwardCase(DType t, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, int64_t d) {
  Case c;
  AttnProblem &p = c.p;
  p.op = Op::Backward;
  p.dtype = t;
  p.batch = b;
  p.heads = hq;
  p.kvHeads = hkv;
  p.seqQ = sq;
  p.seqK = sk;
  p.headDim = p.headDimV = d;
  p.q = p.o = p.dO = p.dQ = Layout{sq * hq * d, d, hq * d};  // BSHD
  p.k = p.v = p.dK = p.dV = Layout{sk * hkv * d, d, hkv * d};
  return c;
}

Layout &layoutOf(AttnProblem &p, Staged t) {
  Layout *all[] = {&p.q, &p.k, &p.v, &p.o, &p.dO, &p.dQ, &p.dK, &p.dV};
  return *all[int(t)];
}

void setPointer(AttnBuffers &b, Staged t, void *ptr) {
  switch (t) {
    case Staged::Q: b.q = ptr; break;
    case Staged::K: b.k = ptr; break;
    case Staged::V: b.v = ptr; break;
    case Staged::O: b.o = ptr; break;
    case Staged::dO: b.dO = ptr; break;
    case Staged::dQ: b.dQ = ptr; break;
    case Staged::dK: b.dK = ptr; break;
    case Staged::dV: b.dV = ptr; break;
  }
}

// The extents of tensor t as the kernels see it: [batch][heads][rows][cols]; ragged: batch 1, rows = tokens; paged:
// [pages][kvHeads][pageSize].
struct Extents {
  int64_t batch, heads, rows, cols;
};
Extents extentsOf(const AttnProblem &p, Staged t) {
  const bool key = isKeySide(t);
  const int64_t cols = (t == Staged::Q || t == Staged::K || t == Staged::dQ || t == Staged::dK) ? p.headDim : p.headDimV;
  const int64_t heads = key ? p.kvHeads : p.heads;
  if (p.paged && key) return {p.numPages, heads, p.pageSize, cols};
  if (p.ragged) return {1, heads, key ? p.totalK : p.totalQ, cols};
  return {p.batch, heads, key ? p.seqK : p.seqQ, cols};
}

// Rows of an input the copy may skip because no kernel reads them (the documented rule, restated): ragged tokens
// past cuSeqlens[batch]; keys past seqlensK[b] of a dense cache that is not broadcast over batches or rows.
int64_t rowLimit(const Case &c, Staged t, int64_t b, int64_t rows) {
  const AttnProblem &p = c.p;
  const bool key = isKeySide(t);
  auto clamp = [&](int64_t v) { return std::min(std::max<int64_t>(v, 0), rows); };
  if (p.ragged) return clamp(key ? c.cuK[size_t(p.batch)] : c.cuQ[size_t(p.batch)]);
  const Layout &l = key ? (t == Staged::K ? p.k : p.v) : p.q;
  if (key && isInput(p.op, t) && !p.paged && !c.seqlensK.empty() && l.batch != 0 && l.row != 0)
    return clamp(c.seqlensK[size_t(b)]);
  return rows;
}

uint32_t loadWord(const std::vector<uint8_t> &bytes, int64_t element, int64_t e) {
  uint32_t w = 0;
  std::memcpy(&w, bytes.data() + element * e, size_t(e));
  return w;
}
void storeWord(std::vector<uint8_t> &bytes, int64_t element, int64_t e, uint32_t w) {
  std::memcpy(bytes.data() + element * e, &w, size_t(e));
}
uint32_t allOnes(int64_t e) { return e == 4 ? 0xFFFFFFFFu : 0xFFFFu; }

// Random bit patterns of e bytes, never the poison pattern, so an element left unwritten is told apart.
void fillRandom(std::vector<uint8_t> &bytes, int64_t e, std::mt19937_64 &rng) {
  for (int64_t i = 0; i < int64_t(bytes.size()) / e; ++i) {
    uint32_t w;
    do w = uint32_t(rng()) & allOnes(e);
    while (w == allOnes(e));
    storeWord(bytes, i, e, w);
  }
}

// One caller-side tensor: an allocation spanning every addressed element (+ its base offset and a 16-element tail).
struct UserTensor {
  bool used = false;
  Extents x{};
  Layout l;
  int64_t offset = 0, e = 2;
  DeviceBuffer buf;
  std::vector<uint8_t> host;  // the allocation's bytes as uploaded (inputs) or as expected (outputs)

  int64_t at(int64_t b, int64_t h, int64_t r, int64_t c) const { return offset + b * l.batch + h * l.head + r * l.row + c; }
  void *ptr() const { return static_cast<uint8_t *>(buf.ptr) + offset * e; }
};

UserTensor makeUser(const AttnProblem &p, Staged t, int64_t offset, bool input, std::mt19937_64 &rng) {
  UserTensor u;
  u.used = true;
  u.x = extentsOf(p, t);
  u.l = flashattn::cuda::stagedLayout(p, t);
  u.offset = offset;
  u.e = int64_t(flashattn::dtypeSize(p.dtype));
  const int64_t span = offset + (u.x.batch - 1) * u.l.batch + (u.x.heads - 1) * u.l.head + (u.x.rows - 1) * u.l.row +
                       u.x.cols + 16;
  u.host.assign(size_t(span * u.e), 0xFF);
  if (input) fillRandom(u.host, u.e, rng);
  u.buf = DeviceBuffer(u.host.data(), u.host.size());
  return u;
}

struct Counts {
  int64_t copied = 0;   // elements compared after a copy
  int64_t skipped = 0;  // rows the copy had to leave alone
};

// Runs stageIn and stageOut on `c` and checks both bitwise. `room` as planStaging's; `expectStaged` the set of
// tensors that must be staged in this call.
Counts runCase(const Case &c, uint32_t room, uint32_t expectStaged, uint64_t seed) {
  const AttnProblem &p = c.p;
  std::mt19937_64 rng(seed);
  const StagingPlan s = planStaging(p, room);
  EXPECT_TRUE(s.addressable);
  const int64_t e = int64_t(flashattn::dtypeSize(p.dtype));

  DeviceBuffer cuQ, cuK, lens;
  AttnProblem withArrays = p;
  if (!c.cuQ.empty()) {
    cuQ = DeviceBuffer(c.cuQ.data(), c.cuQ.size() * 4);
    cuK = DeviceBuffer(c.cuK.data(), c.cuK.size() * 4);
    withArrays.cuSeqlensQ = cuQ.get<int32_t>();
    withArrays.cuSeqlensK = cuK.get<int32_t>();
  }
  if (!c.seqlensK.empty()) {
    lens = DeviceBuffer(c.seqlensK.data(), c.seqlensK.size() * 4);
    withArrays.seqlensK = lens.get<int32_t>();
  }
  const StagingPlan plan = planStaging(withArrays, room);
  EXPECT_EQ(plan.totalBytes, s.totalBytes);

  UserTensor user[kStagedCount];
  AttnBuffers buffers;
  for (int i = 0; i < kStagedCount; ++i) {
    const Staged t = Staged(i);
    if (!plan.tensor[i].candidate) continue;
    user[i] = makeUser(withArrays, t, c.offset[i], isInput(p.op, t), rng);
    setPointer(buffers, t, user[i].ptr());
  }
  uint32_t staged = 0;
  for (int i = 0; i < kStagedCount; ++i)
    if (flashattn::cuda::stagedInCall(plan, Staged(i), buffers)) staged |= 1u << i;
  EXPECT_EQ(staged, expectStaged);

  constexpr std::size_t kTail = 256;
  DeviceBuffer ws(plan.totalBytes + kTail);
  ws.poison();
  cudaStream_t stream = nullptr;
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The uploads and the poison went through the legacy stream, which a non-blocking stream does not wait for (a
  // pageable upload returns before its DMA lands): the copies must not start before they are done.
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  AttnBuffers kernel;
  EXPECT_EQ(flashattn::cuda::stageIn(plan, withArrays, buffers, ws.ptr, &kernel, stream), cudaSuccess);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  Counts counts;
  std::vector<uint8_t> slots = ws.raw();
  const AttnProblem kernelProblem = flashattn::cuda::restage(withArrays, plan, buffers);
  for (int i = 0; i < kStagedCount; ++i) {
    const Staged t = Staged(i);
    const UserTensor &u = user[i];
    if (!u.used) continue;
    const void *seen = flashattn::cuda::stagedPointer(kernel, t);
    if (!(staged & (1u << i))) {
      EXPECT_EQ(seen, u.ptr()) << stagedName(t) << ": an unstaged tensor keeps the caller's pointer";
      EXPECT_TRUE(flashattn::cuda::stagedLayout(kernelProblem, t) == u.l) << stagedName(t);
      continue;
    }
    const auto &st = plan.tensor[i];
    EXPECT_EQ(seen, static_cast<uint8_t *>(ws.ptr) + st.offset) << stagedName(t);
    const Layout &pk = flashattn::cuda::stagedLayout(kernelProblem, t);
    EXPECT_TRUE(pk == st.packed) << stagedName(t);
    for (int64_t v : {pk.batch, pk.head, pk.row}) EXPECT_EQ(v * e % 16, 0) << stagedName(t) << " packed stride " << v;
    if (!isInput(p.op, t)) continue;
    EXPECT_TRUE(u.buf.raw() == u.host) << stagedName(t) << ": stageIn wrote to its source";
    for (int64_t b = 0; b < u.x.batch; ++b)
      for (int64_t h = 0; h < u.x.heads; ++h)
        for (int64_t r = 0; r < u.x.rows; ++r) {
          const int64_t packedRow = int64_t(st.offset) / e + b * pk.batch + h * pk.head + r * pk.row;
          const bool skip = r >= rowLimit(c, t, b, u.x.rows);
          counts.skipped += skip;
          for (int64_t col = 0; col < st.pitch; ++col) {
            const uint32_t got = loadWord(slots, packedRow + col, e);
            const uint32_t want = skip ? allOnes(e) : col >= u.x.cols ? 0u : loadWord(u.host, u.at(b, h, r, col), e);
            if (got != want) {
              ADD_FAILURE() << typeName(p.dtype) << " " << stagedName(t) << " [" << b << "][" << h << "][" << r
                            << "][" << col << "] in its slot is " << got << ", not " << want
                            << (skip ? " (a row no kernel reads: the copy must skip it)"
                                     : col >= u.x.cols ? " (a pitch column: zero)" : "");
              return counts;
            }
            counts.copied += !skip && col < u.x.cols;
          }
        }
  }
  for (std::size_t i = plan.totalBytes; i < plan.totalBytes + kTail; ++i)
    if (slots[i] != 0xFF) ADD_FAILURE() << "stageIn wrote past the staging workspace at byte " << i;

  // The kernels' part: every staged output slot gets fresh random bits (a kernel writes every element it owns).
  std::vector<uint8_t> written = slots;
  for (int i = 0; i < kStagedCount; ++i) {
    if (!(staged & (1u << i)) || isInput(p.op, Staged(i))) continue;
    const auto &st = plan.tensor[i];
    std::vector<uint8_t> fresh(st.bytes);
    fillRandom(fresh, e, rng);
    std::copy(fresh.begin(), fresh.end(), written.begin() + std::ptrdiff_t(st.offset));
  }
  FA_CUDA_CHECK(cudaMemcpyAsync(ws.ptr, written.data(), written.size(), cudaMemcpyHostToDevice, stream));
  EXPECT_EQ(flashattn::cuda::stageOut(plan, withArrays, buffers, ws.ptr, stream), cudaSuccess);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  FA_CUDA_CHECK(cudaStreamDestroy(stream));

  for (int i = 0; i < kStagedCount; ++i) {
    const Staged t = Staged(i);
    UserTensor &u = user[i];
    if (!u.used || isInput(p.op, t)) continue;
    const std::vector<uint8_t> got = u.buf.raw();
    if (!(staged & (1u << i))) {
      EXPECT_TRUE(got == u.host) << stagedName(t) << ": stageOut wrote an output it did not stage";
      continue;
    }
    const auto &st = plan.tensor[i];
    std::vector<uint8_t> expect = u.host;  // 0xFF everywhere
    for (int64_t b = 0; b < u.x.batch; ++b)
      for (int64_t h = 0; h < u.x.heads; ++h)
        for (int64_t r = 0; r < u.x.rows; ++r) {
          if (r >= rowLimit(c, t, b, u.x.rows)) {
            ++counts.skipped;
            continue;  // stays as the caller left it
          }
          const int64_t packedRow = int64_t(st.offset) / e + b * st.packed.batch + h * st.packed.head + r * st.packed.row;
          for (int64_t col = 0; col < u.x.cols; ++col) {
            storeWord(expect, u.at(b, h, r, col), e, loadWord(written, packedRow + col, e));
            ++counts.copied;
          }
        }
    for (std::size_t k = 0; k < got.size(); k += std::size_t(e))
      if (std::memcmp(got.data() + k, expect.data() + k, std::size_t(e)) != 0) {
        ADD_FAILURE() << typeName(p.dtype) << " " << stagedName(t) << " element " << int64_t(k) / e
                      << (loadWord(expect, int64_t(k) / e, e) == allOnes(e) ? " must be left untouched"
                                                                            : " differs from its slot");
        break;
      }
  }
  return counts;
}

uint32_t bits(std::initializer_list<Staged> ts) {
  uint32_t b = 0;
  for (Staged t : ts) b |= 1u << int(t);
  return b;
}

// The contract break: bf16 headDim 176, B3 Hq16 Hkv2, seq 3, dO batch stride 2819; FP32 headDim 96 with
// strides that are not 16-byte multiples. Every other tensor is odd in some walked stride too.
TEST(GpuStaging, BackwardOddStridesEveryTensor) {
  for (DType t : kTypes) {
    const int64_t d = t == DType::FP32 ? 96 : 176;
    Case c = backwardCase(t, 3, 16, 2, 3, 3, d);
    c.p.dO.batch = 2819;
    c.p.q.row = 16 * d + 1;
    c.p.q.batch = 3 * (16 * d + 1);
    c.p.k.head = d + 2;  // K [b][s][h] with heads d + 2 apart
    c.p.k.row = 2 * (d + 2);
    c.p.k.batch = 3 * 2 * (d + 2);
    c.p.v = Layout{2 * 3 * d + 3, 3 * d, d};  // BHSD, odd batch stride
    c.p.o.head = d + 1;
    c.p.o.row = 16 * (d + 1);
    c.p.o.batch = 3 * 16 * (d + 1);
    c.p.dQ.batch = 3 * 16 * d + 5;
    c.p.dK = Layout{3 * 2 * (d + 3), 3 * (d + 3), d + 3};
    c.p.dV.row = 2 * d + 2;
    c.p.dV.batch = 3 * (2 * d + 2);
    const Counts n = runCase(c, kNoStagedRoom, 0xFF, 1);
    EXPECT_EQ(n.copied, 4 * (3 * 16 * 3 * d) + 4 * (3 * 2 * 3 * d)) << typeName(t);  // Q, O, dO, dQ; K, V, dK, dV
  }
}

// Ragged batches: tokens past cuSeqlens[batch] belong to no sequence; inputs skip them, outputs keep them untouched.
TEST(GpuStaging, BackwardRaggedTokenStrides) {
  for (DType t : kTypes) {
    const int64_t d = 64, hq = 4, hkv = 2;
    Case c = backwardCase(t, 3, hq, hkv, 7, 9, d);
    AttnProblem &p = c.p;
    p.ragged = true;
    c.cuQ = {0, 3, 3, 10};  // 12 tokens, 2 owned by no sequence
    c.cuK = {0, 9, 13, 16};
    p.totalQ = 12;
    p.totalK = 19;
    for (int i = 0; i < kStagedCount; ++i) {
      const int64_t heads = isKeySide(Staged(i)) ? hkv : hq;
      layoutOf(p, Staged(i)) = Layout{0, d, heads * d};  // [token][head][dim]
    }
    p.q.row = hq * d + 1;  // tokens an odd number of elements apart
    p.dQ.row = hq * d + 3;
    p.k.head = d + 1;
    p.k.row = hkv * (d + 1);
    p.dV.row = hkv * d + 5;
    const Counts n = runCase(c, kNoStagedRoom, bits({Staged::Q, Staged::K, Staged::dQ, Staged::dV}), 2);
    EXPECT_EQ(n.copied, (10 * hq + 16 * hkv + 10 * hq + 16 * hkv) * d) << typeName(t);
    EXPECT_EQ(n.skipped, 2 * hq + 3 * hkv + 2 * hq + 3 * hkv) << typeName(t);
  }
}

// Decode over a dense cache with per-sequence lengths: keys past seqlensK[b] are never read, so never copied.
TEST(GpuStaging, DecodeDenseCacheWithLengths) {
  for (DType t : kTypes) {
    const int64_t d = 128;
    Case c = backwardCase(t, 3, 8, 2, 2, 37, d);
    AttnProblem &p = c.p;
    p.op = Op::DecodeChunk;
    c.seqlensK = {37, 0, 20};
    p.k.row = 2 * d + 2;  // rows 2 elements beyond BSHD
    p.k.batch = 37 * (2 * d + 2);
    p.v = Layout{2 * 37 * d + 6, 37 * d, d};  // BHSD: only the batch stride is off
    p.o.head = d + 7;
    p.o.row = 8 * (d + 7);
    p.o.batch = 2 * 8 * (d + 7);
    const Counts n = runCase(c, kNoStagedRoom, bits({Staged::K, Staged::V, Staged::O}), 3);
    EXPECT_EQ(n.copied, 2 * (37 + 0 + 20) * 2 * d + 3 * 8 * 2 * d) << typeName(t);
    EXPECT_EQ(n.skipped, 2 * (0 + 37 + 17) * 2) << typeName(t);
  }
}

// A paged cache is staged as a whole pool, [page][row][head][dim].
TEST(GpuStaging, DecodePagedPool) {
  for (DType t : kTypes) {
    const int64_t d = 64, hkv = 2;
    Case c = backwardCase(t, 2, 4, hkv, 1, 0, d);
    AttnProblem &p = c.p;
    p.op = Op::DecodeChunk;
    p.paged = true;
    p.numPages = 5;
    p.pageSize = 3;
    p.maxPagesPerSeq = 2;
    p.seqK = 6;
    c.seqlensK = {6, 2};
    p.k = Layout{3 * hkv * (d + 1), d + 1, hkv * (d + 1)};  // page, head, row strides of [page][row][head][dim]
    p.v = Layout{3 * hkv * d + 2, d, hkv * d};
    const Counts n = runCase(c, kNoStagedRoom, bits({Staged::K, Staged::V}), 4);
    EXPECT_EQ(n.copied, 2 * 5 * hkv * 3 * d) << typeName(t);
    EXPECT_EQ(n.skipped, 0) << "a pool has no row limit";
  }
}

// Base pointers that are element-aligned but not 16-byte aligned are staged when the plan has room for them;
// aligned ones are not, and tensors without room keep their pointers.
TEST(GpuStaging, MisalignedBasePointers) {
  for (DType t : kTypes) {
    const int64_t d = 64;
    Case c = backwardCase(t, 2, 4, 2, 5, 6, d);
    c.offset[int(Staged::Q)] = 1;
    c.offset[int(Staged::V)] = 16 / int64_t(flashattn::dtypeSize(t));  // 16 bytes: aligned
    c.offset[int(Staged::dO)] = 3;
    c.offset[int(Staged::dK)] = 1;
    Counts n = runCase(c, kAllStagedRoom, bits({Staged::Q, Staged::dO, Staged::dK}), 5);
    EXPECT_EQ(n.copied, (2 * 4 * 5 + 2 * 4 * 5 + 2 * 2 * 6) * d) << typeName(t);
    n = runCase(c, flashattn::cuda::stagedBit(Staged::dO), bits({Staged::dO}), 6);
    EXPECT_EQ(n.copied, 2 * 4 * 5 * d) << typeName(t);
  }
}

// 65537 heads or batches at small memory: a broadcast input (stride 0) is one copy, outputs are rows of 8.
TEST(GpuStaging, Edges65537) {
  for (DType t : kTypes) {
    const int64_t d = 8;
    {
      Case c = backwardCase(t, 2, 65537, 1, 1, 3, d);
      AttnProblem &p = c.p;
      p.op = Op::DecodeChunk;
      p.q = Layout{d + 1, 0, d + 1};                 // every head reads one row; 2 sequences, odd strides
      p.k = Layout{0, 0, d + 1};                     // one cache for both sequences, odd rows
      p.v = Layout{3 * d, 0, d};                     // aligned
      p.o = Layout{65537 * (d + 1), d + 1, d + 1};   // [b][h][1 row] with odd heads
      const Counts n = runCase(c, kNoStagedRoom, bits({Staged::Q, Staged::K, Staged::O}), 7);
      EXPECT_EQ(n.copied, (2 * 65537 + 2 * 3 + 2 * 65537) * d) << typeName(t);  // Q and K as the kernels see them
      const StagingPlan s = planStaging(p);
      EXPECT_LT(s[Staged::Q].bytes + s[Staged::K].bytes, 1024u) << "broadcasts stay one copy";
    }
    {
      Case c = backwardCase(t, 65537, 2, 1, 1, 2, d);
      AttnProblem &p = c.p;
      p.dO = Layout{0, d + 1, 0};          // one sequence and one row for all; odd head stride
      p.dK = Layout{2 * d + 2, 5, d + 1};  // one KV head (its stride 5 is not walked); odd rows
      p.dQ = Layout{2 * d + 1, d, 3};      // odd batch stride
      const Counts n = runCase(c, kNoStagedRoom, bits({Staged::dO, Staged::dQ, Staged::dK}), 8);
      EXPECT_EQ(n.copied, (65537 * 2 + 65537 * 2 + 65537 * 2) * d) << typeName(t);
      EXPECT_LT(planStaging(p)[Staged::dO].bytes, 1024u) << "a broadcast stays one copy";
    }
  }
}

// Offsets past 2^31 elements: the copy's index arithmetic is 64-bit. Q and O are interleaved in one 4.3 GB allocation
// (Q's rows at 0 and 2^31 + 9 elements, O's 128 elements after each); not in the sanitizer's edge slice.
TEST(GpuStaging, OffsetsBeyond32Bits) {
  if (fa_test::edgeSliceOnly()) GTEST_SKIP() << "4.3 GB allocation: not in the edge slice";
  const int64_t d = 64, stride = (int64_t(1) << 31) + 9, e = 2;
  const std::size_t bytes = std::size_t(stride + 4 * d) * e;
  std::size_t freeBytes = 0, totalBytes = 0;
  FA_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  if (freeBytes < bytes + (std::size_t(1) << 30)) GTEST_SKIP() << "needs 5.3 GB of free device memory";
  Case c = backwardCase(DType::FP16, 2, 1, 1, 1, 1, d);
  AttnProblem &p = c.p;
  p.op = Op::DecodeChunk;
  p.q.batch = stride;
  p.o.batch = stride;
  const StagingPlan s = planStaging(p);
  ASSERT_TRUE(s[Staged::Q].byStrides && s[Staged::O].byStrides);
  ASSERT_FALSE(s[Staged::K].reserved || s[Staged::V].reserved);
  DeviceBuffer big(bytes), k(d * e), v(d * e), ws(s.totalBytes);
  big.poison();
  ws.poison();
  std::mt19937_64 rng(9);
  std::vector<uint8_t> rows(std::size_t(2 * d * e));
  fillRandom(rows, e, rng);
  uint8_t *base = big.get<uint8_t>();
  FA_CUDA_CHECK(cudaMemcpy(base, rows.data(), d * e, cudaMemcpyHostToDevice));
  FA_CUDA_CHECK(cudaMemcpy(base + stride * e, rows.data() + d * e, d * e, cudaMemcpyHostToDevice));
  AttnBuffers user, kernel;
  user.q = base;
  user.k = k.ptr;
  user.v = v.ptr;
  user.o = base + 2 * d * e;
  ASSERT_EQ(flashattn::cuda::stageIn(s, p, user, ws.ptr, &kernel, nullptr), cudaSuccess);
  // The kernel's part: O's slot gets Q's packed rows.
  ASSERT_EQ(cudaMemcpy(kernel.o, kernel.q, 2 * d * e, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_EQ(flashattn::cuda::stageOut(s, p, user, ws.ptr, nullptr), cudaSuccess);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> packed(std::size_t(2 * d * e));
  FA_CUDA_CHECK(cudaMemcpy(packed.data(), kernel.q, packed.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(packed == rows) << "Q's two rows, 2^31 + 9 elements apart, packed together";
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<uint8_t> got(std::size_t(4 * d * e));
    FA_CUDA_CHECK(cudaMemcpy(got.data(), base + b * stride * e, got.size(), cudaMemcpyDeviceToHost));
    const auto row = rows.begin() + b * d * e;
    EXPECT_TRUE(std::equal(row, row + d * e, got.begin())) << "Q row " << b << " unchanged";
    EXPECT_TRUE(std::all_of(got.begin() + d * e, got.begin() + 2 * d * e, [](uint8_t x) { return x == 0xFF; }));
    EXPECT_TRUE(std::equal(row, row + d * e, got.begin() + 2 * d * e)) << "O row " << b << " from its slot";
    EXPECT_TRUE(std::all_of(got.begin() + 3 * d * e, got.end(), [](uint8_t x) { return x == 0xFF; }));
  }
}

// Rows whose head dim is not a multiple of 16 bytes get a pitch that is: the copy zero-fills the tail of each packed
// row (here Q/K/dQ/dK 36 and V/O/dO/dV 20 elements wide, padded to 40 and 24 for 2-byte types, 36 and 20 for FP32).
TEST(GpuStaging, PitchPadsRowsToSixteenBytes) {
  for (DType t : kTypes) {
    Case c = backwardCase(t, 2, 4, 2, 3, 5, 36);
    AttnProblem &p = c.p;
    p.headDimV = 20;
    p.v = p.dV = Layout{5 * 2 * 20, 20, 2 * 20};
    p.o = p.dO = Layout{3 * 4 * 20, 20, 4 * 20};
    const int64_t perVector = 16 / int64_t(flashattn::dtypeSize(t));
    const uint32_t want = perVector == 8 ? kAllStagedRoom : 0u;
    const Counts n = runCase(c, kNoStagedRoom, want, 11);
    if (perVector == 8) {
      EXPECT_EQ(planStaging(p)[Staged::Q].pitch, 40);
      EXPECT_EQ(planStaging(p)[Staged::V].pitch, 24);
      EXPECT_EQ(planStaging(p)[Staged::dV].pitch, 24);
      // Q and dQ, K and dK, V and dV, O and dO: each pair of one shape.
      EXPECT_EQ(n.copied, 2 * (2 * 4 * 3 * 36 + 2 * 2 * 5 * 36 + 2 * 2 * 5 * 20 + 2 * 4 * 3 * 20)) << typeName(t);
    } else {
      EXPECT_EQ(n.copied, 0) << "FP32 rows of 36 and 20 elements are 16-byte multiples";
    }
  }
}

// Both copies are plain launches on the stream: captured into a graph and replayed they give the eager bytes.
TEST(GpuStaging, GraphCaptureReplaysTheSameCopies) {
  const int64_t d = 96;
  Case c = backwardCase(DType::BF16, 2, 4, 2, 9, 11, d);
  AttnProblem &p = c.p;
  p.dO.row = 4 * d + 3;
  p.dO.batch = 9 * (4 * d + 3);
  p.dK.row = 2 * d + 1;
  p.dK.batch = 11 * (2 * d + 1);
  const StagingPlan s = planStaging(p);
  std::mt19937_64 rng(10);
  std::vector<uint8_t> dOHost(std::size_t(2 * 9 * (4 * d + 3) * 2));
  fillRandom(dOHost, 2, rng);
  DeviceBuffer q(2 * 9 * 4 * d * 2), k(2 * 11 * 2 * d * 2), v(2 * 11 * 2 * d * 2), o(2 * 9 * 4 * d * 2),
      dO(dOHost.data(), dOHost.size()), dQ(2 * 9 * 4 * d * 2), dK(std::size_t(2 * 11 * (2 * d + 1) * 2)),
      dV(2 * 11 * 2 * d * 2), ws(s.totalBytes);
  AttnBuffers user{q.ptr, k.ptr, v.ptr, o.ptr, nullptr, dO.ptr, dQ.ptr, dK.ptr, dV.ptr};
  cudaStream_t stream = nullptr;
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  FA_CUDA_CHECK(cudaDeviceSynchronize());  // dO's upload (legacy stream) has landed before the copies read it
  auto both = [&]() {
    AttnBuffers kernel;
    EXPECT_EQ(flashattn::cuda::stageIn(s, p, user, ws.ptr, &kernel, stream), cudaSuccess);
    // Stands in for the backward kernel: dK's slot from dO's slot (both [.][.][rows][d] packed, dK's is smaller).
    EXPECT_EQ(cudaMemcpyAsync(kernel.dK, kernel.dO, s[Staged::dK].bytes, cudaMemcpyDeviceToDevice, stream),
              cudaSuccess);
    EXPECT_EQ(flashattn::cuda::stageOut(s, p, user, ws.ptr, stream), cudaSuccess);
  };
  ws.poison();
  dK.poison();
  both();
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> eagerWs = ws.raw(), eagerDK = dK.raw();
  int64_t finite = 0;
  for (std::size_t i = 0; i + 1 < eagerDK.size(); i += 2) finite += (eagerDK[i] != 0xFF || eagerDK[i + 1] != 0xFF);
  EXPECT_EQ(finite, 2 * 11 * 2 * d) << "the eager run wrote every dK element";
  ws.poison();
  dK.poison();
  fa_test::captureAndReplay(stream, both);
  EXPECT_TRUE(ws.raw() == eagerWs);
  EXPECT_TRUE(dK.raw() == eagerDK);
  FA_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Nothing to stage: no workspace, no launch, the caller's buffers unchanged; a plan of another problem is refused.
TEST(GpuStaging, NothingStagedAndWrongPlan) {
  Case c = backwardCase(DType::FP16, 2, 4, 2, 5, 6, 64);
  const StagingPlan s = planStaging(c.p);
  EXPECT_EQ(s.totalBytes, 0u);
  alignas(16) static uint8_t fake[16];
  AttnBuffers user{fake, fake, fake, fake, nullptr, fake, fake, fake, fake};
  AttnBuffers kernel;
  EXPECT_EQ(flashattn::cuda::stageIn(s, c.p, user, nullptr, &kernel, nullptr), cudaSuccess);
  EXPECT_EQ(kernel.q, user.q);
  EXPECT_EQ(kernel.dV, user.dV);
  EXPECT_EQ(flashattn::cuda::stageOut(s, c.p, user, nullptr, nullptr), cudaSuccess);

  AttnProblem odd = c.p;
  odd.dO.row = 4 * 64 + 1;
  const StagingPlan oddPlan = planStaging(odd);
  EXPECT_EQ(flashattn::cuda::stageIn(oddPlan, c.p, user, nullptr, &kernel, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(flashattn::cuda::stageIn(oddPlan, odd, user, nullptr, &kernel, nullptr), cudaErrorInvalidValue)
      << "dO is staged but there is no workspace";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
