// SPDX-License-Identifier: BSD-3-Clause
// The HOST backend's test harness: builds a problem's tensors in the layout a case asks for (dense BHSD/BSHD with row
// padding, stride-0 KV broadcast, ragged packed, padded or paged caches), runs it through the PUBLIC API on a HOST
// handle with every output poisoned (NaN), and holds the outputs against the float64 oracle of
// tests/common/reference.hpp with both gates of docs/testing.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

namespace host_test {

using fa_test::roundingOf;
using fa_test::typeName;

using fa_test::HostTensor;
using fa_test::Order;


// One forward (and optionally backward) problem.
struct AttnCase {
  flashAttnDataType_t dtype = FLASHATTN_DATA_FP32;
  int64_t batch = 1, heads = 1, kvHeads = 1, headDim = 64, headDimV = 64;
  int64_t seqQ = 1, seqK = 1;  // dense lengths; ragged: maxSeqlenQ/K (>= every length)
  Order order = Order::BHSD;   // Q, K, V, O; dO takes the other order with one more pad (non-contiguous)
  int64_t rowPad = 0;          // unused elements after every row
  bool broadcastKv = false;    // K/V hold one physical head read through head stride 0 (kvHeads == heads)
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  int64_t windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  int alibi = 0;  // 0 off, 1 slopes [heads], 2 slopes [batch, heads]
  float scale = 0.f;
  double valueScale = 1.0;  // x5 stresses the softmax
  bool withLse = true;
  std::vector<int64_t> raggedQ, raggedK;  // per-sequence lengths: a ragged (packed) batch when non-empty
  std::vector<int64_t> kvLengths;         // dense batch with per-sequence used KV lengths (seqlensK)
  // > 0: K/V in a paged cache (forward only; kvLengths or seqK each). With raggedQ (raggedK empty): chunked prefill,
  // a ragged Q over the paged cache, cuSeqlensK NULL.
  int64_t pageSize = 0;
  std::vector<float> sinks;               // [heads] attention sinks (empty = off); backward then checks dSinks too
  uint64_t seed = 1;

  bool ragged() const { return !raggedQ.empty(); }
  bool raggedKv() const { return ragged() && pageSize == 0; }  // K and V packed by cuSeqlensK
  // Multiply-adds of one float64 reference pass, to keep the grid's cost in check.
  double cost() const;
  std::string describe() const;
};

struct GateReport {
  bool pass = true;
  std::string text;  // one line per checked output
  void add(const char *name, const fa_ref::Gate &g);
};

// Everything a case produced, kept for determinism comparisons.
struct AttnOutputs {
  std::vector<uint8_t> o, lse, dQ, dK, dV, dSinks;
  bool operator==(const AttnOutputs &other) const {
    return o == other.o && lse == other.lse && dQ == other.dQ && dK == other.dK && dV == other.dV &&
           dSinks == other.dSinks;
  }
};

// Runs the forward (and the backward when withBackward) of `c` through the public API. When check is set, compares
// with the oracle; the report's text says what failed. API failures are reported as failing gates.
GateReport runAttnCase(const AttnCase &c, bool withBackward, bool check = true, AttnOutputs *outputs = nullptr);

// A split-KV decode problem, run against a dense padded cache and paged caches of several page sizes holding the same
// keys, once per chunk count; the oracle runs once for all of them.
struct DecodeCase {
  flashAttnDataType_t dtype = FLASHATTN_DATA_FP32;
  int64_t batch = 1, heads = 1, kvHeads = 1, headDim = 64, headDimV = 64;
  int64_t seqQ = 1;                   // query tokens per sequence (1..16)
  int64_t seqK = 1;                   // cache capacity per sequence
  std::vector<int64_t> kvLengths;     // per sequence, <= seqK; empty = seqK for all
  std::vector<int64_t> pageSizes{0};  // 0 = dense [batch, kvHeads, seqK, d] cache
  bool paddedPages = false;           // paged caches with padded (non-packed) strides
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  int64_t windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  int alibi = 0;
  std::vector<float> sinks;  // [heads] attention sinks (empty = off)
  bool withLse = true;
  std::vector<int32_t> chunks;  // 0 = automatic
  // 0: every cache kind runs every chunk count; n: cache kind p runs n of them, starting at (p + chunkRotation) * n
  // (wrapping), so the counts spread over the kinds of a costly shape.
  int chunksPerCache = 0;
  int chunkRotation = 0;
  uint64_t seed = 1;

  double cost() const;
  std::string describe() const;
};

struct DecodeRun {
  int64_t pageSize = 0;
  int32_t chunks = 0;
  GateReport report;
  AttnOutputs outputs;
};
std::vector<DecodeRun> runDecodeCase(const DecodeCase &c);

// A merge of partial states, some of them empty (LSE -inf, O poisoned with NaN), some rows all-empty.
struct MergeCase {
  flashAttnDataType_t outType = FLASHATTN_DATA_FP32;
  int64_t states = 2, batch = 1, heads = 1, seqQ = 1, headDimV = 64;
  bool stridedPartials = false;  // partial O/LSE with padded, state-inner strides
  double emptyFraction = 0.2;    // share of (state, row) pairs with LSE -inf
  bool withLse = true;
  uint64_t seed = 1;
  std::string describe() const;
};
GateReport runMergeCase(const MergeCase &c, AttnOutputs *outputs = nullptr);

// Aligned host workspace of at least `bytes` (256-byte aligned as the API requires).
class Workspace {
 public:
  explicit Workspace(size_t bytes);
  void *data() { return bytes_ ? static_cast<void *>(storage_.data() + offset_) : nullptr; }
  size_t size() const { return bytes_; }

 private:
  std::vector<uint8_t> storage_;
  size_t offset_ = 0;
  size_t bytes_ = 0;
};

// Value of FLASHATTN_HOST_THREADS for the lifetime of the object (the pool reads it at every call).
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads);
  ~ScopedThreads();

 private:
  std::string previous_;
  bool hadPrevious_ = false;
};

}  // namespace host_test
