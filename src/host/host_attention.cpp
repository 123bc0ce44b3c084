// SPDX-License-Identifier: BSD-3-Clause
#include "host/host_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/plan.hpp"
#include "host/thread_pool.hpp"

namespace flashattn::host {
namespace {

// Arithmetic precision of the whole computation. The storage types are FP16/BF16/FP32, but the oracle gates hold
// FP32 storage to max|out - ref| <= 2 max|lp - ref| + 1e-5 where lp rounds a float64 dot product once; an FP32 dot
// product of 100+ terms of x5-scaled inputs already misses that by 10x. Accumulating in double leaves the storage
// rounding as the only error, so the reference backend passes every gate with room.
using Acc = double;

// Keys are processed in tiles of this width, converted once to Acc and laid out so that the inner loops run over
// the tile (vectorizable without reassociating any sum, so every result has one fixed summation order).
constexpr int64_t kKeyTile = 64;
// Query rows sharing one converted key tile in forward and in the dQ pass.
constexpr int64_t kRowBlock = 32;
constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
// Item counts are products of problem sizes; one past int64 is a problem no host could run.
constexpr const char *kTooManyItems = "the problem has more than 2^63 work items: too large for the HOST backend";

struct Fp16Storage {
  using Raw = uint16_t;
  static float load(Raw r) { return fp16ToFloat(r); }
  static Raw store(float f) { return floatToFp16(f); }
};
struct Bf16Storage {
  using Raw = uint16_t;
  static float load(Raw r) { return bf16ToFloat(r); }
  static Raw store(float f) { return floatToBf16(f); }
};
struct Fp32Storage {
  using Raw = float;
  static float load(Raw r) { return r; }
  static Raw store(float f) { return f; }
};

template <class S>
void loadRow(const void *base, int64_t offset, int64_t n, Acc *out) {
  const auto *src = static_cast<const typename S::Raw *>(base) + offset;
  for (int64_t i = 0; i < n; ++i) out[i] = S::load(src[i]);
}

// Rounds through float first, as the oracle's storage-rounded variant does.
template <class S>
void storeRow(void *base, int64_t offset, int64_t n, const Acc *in) {
  auto *dst = static_cast<typename S::Raw *>(base) + offset;
  for (int64_t i = 0; i < n; ++i) dst[i] = S::store(float(in[i]));
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Where the rows of every sequence live, for dense, ragged and paged problems alike.
class Sequences {
 public:
  explicit Sequences(const AttnProblem &p) : p_(p) {}

  int64_t queryRows(int64_t b) const { return p_.ragged ? int64_t(p_.cuSeqlensQ[b + 1]) - p_.cuSeqlensQ[b] : p_.seqQ; }

  // Keys sequence b attends to.
  int64_t keyRows(int64_t b) const {
    if (p_.seqlensK) return p_.seqlensK[b];
    if (p_.paged) return p_.seqK;
    return keyRowsOwned(b);
  }

  // Key rows of the K/V tensors that belong to sequence b, used or not (backward gives the unused ones zero gradient).
  int64_t keyRowsOwned(int64_t b) const {
    if (p_.ragged && p_.cuSeqlensK && !p_.paged) return int64_t(p_.cuSeqlensK[b + 1]) - p_.cuSeqlensK[b];
    return p_.seqK;
  }

  int64_t queryOffset(const Layout &l, int64_t b, int64_t h, int64_t i) const {
    const int64_t row = p_.ragged ? p_.cuSeqlensQ[b] + i : i;
    return b * l.batch + h * l.head + row * l.row;
  }

  int64_t keyOffset(const Layout &l, int64_t b, int64_t kvHead, int64_t t) const {
    if (p_.paged) {
      const int64_t page = p_.blockTable[b * p_.maxPagesPerSeq + t / p_.pageSize];
      return page * l.batch + (t % p_.pageSize) * l.row + kvHead * l.head;
    }
    const int64_t row = p_.ragged && p_.cuSeqlensK ? p_.cuSeqlensK[b] + t : t;
    return b * l.batch + kvHead * l.head + row * l.row;
  }

  int64_t kvHeadOf(int64_t h) const { return h / (p_.heads / p_.kvHeads); }

  Acc alibiSlope(int64_t b, int64_t h) const {
    return p_.alibiSlopes ? p_.alibiSlopes[b * p_.alibiBatchStride + h] : 0.0;
  }

  // The sink logit of query head h (sinks given), in logit units: no scale, softcap, mask or ALiBi applies to it.
  bool hasSinks() const { return p_.sinks != nullptr; }
  Acc sink(int64_t h) const { return p_.sinks[h]; }

  // Visible keys of row i clipped to [begin, end); empty when lo > hi.
  KeyRange visible(int64_t i, int64_t sq, int64_t sk, int64_t begin, int64_t end) const {
    KeyRange r = visibleKeys(p_.mask, p_.windowLeft, p_.windowRight, i, sq, sk);
    r.lo = std::max(r.lo, begin);
    r.hi = std::min(r.hi, end - 1);
    return r;
  }

 private:
  const AttnProblem &p_;
};

// Turns raw dot products s[0..n) of keys j0.. into logits (scale, softcap, ALiBi) and, when asked, d logit / d dot.
void finishLogits(const AttnProblem &p, Acc slope, int64_t diagonal, int64_t j0, int64_t begin, int64_t end, Acc *s,
                  Acc *deriv) {
  for (int64_t jj = begin; jj < end; ++jj) {
    Acc x = s[jj] * p.scale;
    Acc d = p.scale;
    if (p.softcap > 0.0) {
      const Acc t = std::tanh(x / p.softcap);
      x = p.softcap * t;
      d *= 1.0 - t * t;
    }
    if (slope != 0.0) x -= slope * Acc(std::llabs(j0 + jj - diagonal));
    s[jj] = x;
    if (deriv) deriv[jj] = d;
  }
}

// dots[jj] = sum_d row[d] * tile[d][jj] over a key tile stored transposed ([dim][kKeyTile]).
void dotTile(const Acc *row, const Acc *tileT, int64_t dim, Acc *dots) {
  for (int64_t jj = 0; jj < kKeyTile; ++jj) dots[jj] = 0.0;
  for (int64_t d = 0; d < dim; ++d) {
    const Acc x = row[d];
    const Acc *col = tileT + d * kKeyTile;
    for (int64_t jj = 0; jj < kKeyTile; ++jj) dots[jj] += x * col[jj];
  }
}

template <class S>
void loadTileTransposed(const Sequences &seq, const void *base, const Layout &l, int64_t b, int64_t kvHead, int64_t j0,
                        int64_t n, int64_t dim, Acc *out) {
  const auto *src = static_cast<const typename S::Raw *>(base);
  for (int64_t jj = 0; jj < n; ++jj) {
    const auto *row = src + seq.keyOffset(l, b, kvHead, j0 + jj);
    for (int64_t d = 0; d < dim; ++d) out[d * kKeyTile + jj] = S::load(row[d]);
  }
  // Lanes past the tile take part in dotTile; zeros keep them finite (they are never read as results).
  for (int64_t d = 0; d < dim; ++d)
    for (int64_t jj = n; jj < kKeyTile; ++jj) out[d * kKeyTile + jj] = 0.0;
}

template <class S>
void loadTileRows(const Sequences &seq, const void *base, const Layout &l, int64_t b, int64_t kvHead, int64_t j0,
                  int64_t n, int64_t dim, Acc *out) {
  for (int64_t jj = 0; jj < n; ++jj) loadRow<S>(base, seq.keyOffset(l, b, kvHead, j0 + jj), dim, out + jj * dim);
}

// Attention of query rows [i0, i0 + rows) of (b, h) over the keys [keyBegin, keyEnd) of the sequence that the mask
// lets them see, with an online softmax. Writes per row the running maximum logit, the sum of exp(logit - max) and
// the unnormalized O = sum exp(logit - max) v ([rows][headDimV]); a row that sees no key gets max -inf, sum 0, O 0.
// The maximum and the sum stay apart so that decode can merge its chunks without rounding log(sum) into a large max.
template <class S>
void attendRows(const AttnProblem &p, const Sequences &seq, const AttnBuffers &buf, int64_t b, int64_t h, int64_t i0,
                int64_t rows, int64_t keyBegin, int64_t keyEnd, Acc *outO, Acc *rowMax, Acc *rowSum) {
  const int64_t dim = p.headDim, dimV = p.headDimV;
  const int64_t sq = seq.queryRows(b), sk = seq.keyRows(b);
  const int64_t kvHead = seq.kvHeadOf(h);
  const Acc slope = seq.alibiSlope(b, h);

  thread_local std::vector<Acc> q, keyT, value, logits;
  thread_local std::vector<KeyRange> ranges;
  q.resize(size_t(rows * dim));
  keyT.resize(size_t(dim * kKeyTile));
  value.resize(size_t(kKeyTile * dimV));
  logits.resize(size_t(kKeyTile));
  std::fill(rowMax, rowMax + rows, kNegInf);
  std::fill(rowSum, rowSum + rows, 0.0);
  ranges.resize(size_t(rows));
  std::fill(outO, outO + rows * dimV, 0.0);

  int64_t unionLo = keyEnd, unionHi = keyBegin - 1;
  for (int64_t r = 0; r < rows; ++r) {
    loadRow<S>(buf.q, seq.queryOffset(p.q, b, h, i0 + r), dim, &q[size_t(r * dim)]);
    ranges[size_t(r)] = seq.visible(i0 + r, sq, sk, keyBegin, keyEnd);
    if (ranges[size_t(r)].lo <= ranges[size_t(r)].hi) {
      unionLo = std::min(unionLo, ranges[size_t(r)].lo);
      unionHi = std::max(unionHi, ranges[size_t(r)].hi);
    }
  }

  for (int64_t j0 = unionLo; j0 <= unionHi; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, unionHi + 1 - j0);
    loadTileTransposed<S>(seq, buf.k, p.k, b, kvHead, j0, n, dim, keyT.data());
    loadTileRows<S>(seq, buf.v, p.v, b, kvHead, j0, n, dimV, value.data());
    for (int64_t r = 0; r < rows; ++r) {
      const KeyRange range = ranges[size_t(r)];
      if (range.lo > range.hi || range.hi < j0 || range.lo >= j0 + n) continue;
      const int64_t begin = std::max<int64_t>(range.lo - j0, 0), end = std::min<int64_t>(range.hi - j0 + 1, n);
      Acc *s = logits.data();
      dotTile(&q[size_t(r * dim)], keyT.data(), dim, s);
      finishLogits(p, slope, alignedRow(i0 + r, sq, sk), j0, begin, end, s, nullptr);
      Acc tileMax = kNegInf;
      for (int64_t jj = begin; jj < end; ++jj) tileMax = std::max(tileMax, s[jj]);
      if (tileMax == kNegInf) continue;
      const Acc oldMax = rowMax[r];
      const Acc newMax = std::max(oldMax, tileMax);
      Acc *acc = outO + r * dimV;
      if (oldMax != newMax) {
        const Acc correction = std::exp(oldMax - newMax);
        rowSum[r] *= correction;
        for (int64_t e = 0; e < dimV; ++e) acc[e] *= correction;
      }
      Acc sum = rowSum[r];
      for (int64_t jj = begin; jj < end; ++jj) {
        const Acc prob = std::exp(s[jj] - newMax);
        sum += prob;
        const Acc *v = &value[size_t(jj * dimV)];
        for (int64_t e = 0; e < dimV; ++e) acc[e] += prob * v[e];
      }
      rowSum[r] = sum;
      rowMax[r] = newMax;
    }
  }
}

// O = acc / sum and LSE = max + log(sum) of rows attendRows (or a merge of its results) left unnormalized; a row
// without a visible key (sum 0) gets O = 0 and LSE = -inf.
void normalizeRows(int64_t rows, int64_t dimV, const Acc *rowMax, const Acc *rowSum, Acc *o, Acc *lse) {
  for (int64_t r = 0; r < rows; ++r) {
    const Acc sum = rowSum[r];
    if (!(sum > 0.0)) {
      std::fill(o + r * dimV, o + (r + 1) * dimV, 0.0);
      lse[r] = kNegInf;
      continue;
    }
    const Acc inv = 1.0 / sum;
    for (int64_t e = 0; e < dimV; ++e) o[r * dimV + e] *= inv;
    lse[r] = rowMax[r] + std::log(sum);
  }
}

// Folds the sink (logit `sink`, no value) into a row's unnormalized state, as a state of maximum `sink`, sum 1 and
// O = 0: a row that saw no key leaves with sum 1 (O = 0, LSE = sink after normalizeRows). Called once per row, after
// every key (every chunk, for decode) is folded.
void foldSink(int64_t dimV, Acc sink, Acc *M, Acc *S, Acc *A) {
  if (!(*S > 0.0)) {
    *M = sink;
    *S = 1.0;
    std::fill(A, A + dimV, 0.0);
    return;
  }
  const Acc top = std::max(*M, sink);
  if (top == kNegInf) return;  // a sink of -inf adds nothing
  const Acc keep = std::exp(*M - top);
  *S = *S * keep + std::exp(sink - top);
  for (int64_t e = 0; e < dimV; ++e) A[e] *= keep;
  *M = top;
}

// Folds one unnormalized state (max m, sum s, O a) into another (M, S, A), as the online softmax folds a key tile:
// both are rescaled to the larger maximum, so no logarithm of a sum is ever added to a maximum and rounded.
void foldState(int64_t dimV, Acc m, Acc s, const Acc *a, Acc *M, Acc *S, Acc *A) {
  if (!(s > 0.0)) return;  // nothing visible in the incoming state
  if (!(*S > 0.0)) {
    *M = m;
    *S = s;
    std::copy(a, a + dimV, A);
    return;
  }
  const Acc top = std::max(*M, m);
  const Acc keep = std::exp(*M - top), take = std::exp(m - top);
  *S = *S * keep + s * take;
  for (int64_t e = 0; e < dimV; ++e) A[e] = A[e] * keep + a[e] * take;
  *M = top;
}

// The merge of one row's FP32 partial states (MergeStates' inputs). Returns the merged LSE and writes O to
// out[0..dimV).
Acc mergeRow(int64_t states, const float *partialO, int64_t stateStrideO, const float *partialLse,
             int64_t stateStrideLse, int64_t dimV, Acc *out) {
  std::fill(out, out + dimV, 0.0);
  Acc maxLse = kNegInf;
  for (int64_t s = 0; s < states; ++s) maxLse = std::max(maxLse, Acc(partialLse[s * stateStrideLse]));
  if (maxLse == kNegInf) return kNegInf;
  Acc sum = 0.0;
  for (int64_t s = 0; s < states; ++s) {
    const Acc lse = partialLse[s * stateStrideLse];
    if (lse == kNegInf) continue;  // an empty state: its O may be anything, it must not be read
    const Acc w = std::exp(lse - maxLse);
    sum += w;
    const float *o = partialO + s * stateStrideO;
    for (int64_t e = 0; e < dimV; ++e) out[e] += w * Acc(o[e]);
  }
  const Acc inv = 1.0 / sum;
  for (int64_t e = 0; e < dimV; ++e) out[e] *= inv;
  return maxLse + std::log(sum);
}

template <class S>
void forwardTyped(const AttnProblem &p, const Extents &ext, const AttnBuffers &buf) {
  const Sequences seq(p);
  // Row blocks of the longest sequence present, not of maxSeqlenQ: a ragged bound of 2^31 over a few short
  // sequences would otherwise make ~10^8 empty items.
  const int64_t blocks = ceilDiv(ext.maxQueryRows, kRowBlock);
  const int64_t dimV = p.headDimV;
  const int64_t items = mulOr(mulOr(p.batch, p.heads, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems), blocks,
                              FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems);
  parallelFor(items, [&](int64_t item) {
    const int64_t block = item % blocks, h = (item / blocks) % p.heads, b = item / (blocks * p.heads);
    const int64_t i0 = block * kRowBlock, sq = seq.queryRows(b);
    if (i0 >= sq) return;
    const int64_t rows = std::min(kRowBlock, sq - i0);
    thread_local std::vector<Acc> o, lse, rowMax, rowSum;
    o.resize(size_t(rows * dimV));
    lse.resize(size_t(rows));
    rowMax.resize(size_t(rows));
    rowSum.resize(size_t(rows));
    attendRows<S>(p, seq, buf, b, h, i0, rows, 0, seq.keyRows(b), o.data(), rowMax.data(), rowSum.data());
    if (seq.hasSinks())
      for (int64_t r = 0; r < rows; ++r)
        foldSink(dimV, seq.sink(h), &rowMax[size_t(r)], &rowSum[size_t(r)], &o[size_t(r * dimV)]);
    normalizeRows(rows, dimV, rowMax.data(), rowSum.data(), o.data(), lse.data());
    for (int64_t r = 0; r < rows; ++r) {
      storeRow<S>(buf.o, seq.queryOffset(p.o, b, h, i0 + r), dimV, &o[size_t(r * dimV)]);
      if (p.hasLse) buf.lse[seq.queryOffset(p.lse, b, h, i0 + r)] = float(lse[size_t(r)]);
    }
  });
}

// Split-KV decode. Chunk c of sequence b holds keys [sk * c / chunks, sk * (c + 1) / chunks) (possibly none). The
// chunks are cut into at most kMaxDecodeGroups contiguous groups; one item per (group, b, h) attends to each chunk of
// its group in turn and folds the chunk's unnormalized state into the group's, which it leaves in the workspace in
// double. A second pass folds the groups of each row in order and normalizes. Folding keeps maxima and sums apart,
// so the result equals Forward's up to double rounding for every accepted input (an FP32 LSE per chunk loses
// log(sum) once |logit| passes ~2^24, and every key once the logits overflow FP32). The groups bound the workspace
// by 64 states per row whatever numChunks is.
template <class S>
void decodeTyped(const AttnProblem &p, int32_t chunks, const DecodeWorkspace &layout, const AttnBuffers &buf,
                 void *workspace) {
  const Sequences seq(p);
  const int64_t dimV = p.headDimV;
  const int64_t groups = layout.groups;
  // State (group g, b, h, i) is row ((g * batch + b) * heads + h) * seqQ + i of the three workspace arrays.
  Acc *stateO = reinterpret_cast<Acc *>(static_cast<char *>(workspace) + layout.oOffset);
  Acc *stateMax = reinterpret_cast<Acc *>(static_cast<char *>(workspace) + layout.maxOffset);
  Acc *stateSum = reinterpret_cast<Acc *>(static_cast<char *>(workspace) + layout.sumOffset);
  const int64_t heads = mulOr(p.batch, p.heads, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems);
  parallelFor(mulOr(groups, heads, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems), [&](int64_t item) {
    const int64_t h = item % p.heads, b = (item / p.heads) % p.batch, g = item / heads;
    const int64_t sk = seq.keyRows(b), sq = seq.queryRows(b);
    const int64_t firstRow = ((g * p.batch + b) * p.heads + h) * p.seqQ;
    Acc *groupO = stateO + firstRow * dimV;
    Acc *groupMax = stateMax + firstRow;
    Acc *groupSum = stateSum + firstRow;
    std::fill(groupSum, groupSum + sq, 0.0);
    // The keys any row of this (b, h) sees: chunks outside them are skipped without touching K or V, so the cost of
    // a huge chunk count is one comparison per chunk.
    int64_t seenLo = sk, seenHi = -1;
    for (int64_t i = 0; i < sq; ++i) {
      const KeyRange r = seq.visible(i, sq, sk, 0, sk);
      if (r.lo <= r.hi) seenLo = std::min(seenLo, r.lo), seenHi = std::max(seenHi, r.hi);
    }
    thread_local std::vector<Acc> o, rowMax, rowSum;
    const int64_t cBegin = mulDivFloor(g, chunks, groups), cEnd = mulDivFloor(g + 1, chunks, groups);
    const auto keyOf = [&](int64_t c) { return mulDivFloor(sk, c, chunks); };  // first key of chunk c
    // The chunks worth visiting, so that the work follows the keys, not numChunks (which may be 2^31 - 1 over a
    // few keys): with no more chunks than keys, those from the chunk of the first seen key to that of the last (the
    // chunk of key t is the last c with keyOf(c) <= t, ceil(chunks * (t + 1) / sk) - 1); with more chunks than keys,
    // each chunk holds at most one key, so the group's seen keys are visited one by one as one-key chunks.
    const auto chunkOf = [&](int64_t t) {
      const __int128 n = static_cast<__int128>(chunks) * (t + 1);
      return int64_t((n + sk - 1) / sk) - 1;
    };
    int64_t first = 0, last = -1;  // chunks [first, last], or keys when single
    const bool single = chunks > sk;
    if (seenLo <= seenHi) {
      if (single) {
        first = std::max(keyOf(cBegin), seenLo);
        last = std::min(keyOf(cEnd) - 1, seenHi);
      } else {
        first = std::max(cBegin, chunkOf(seenLo));
        last = std::min(cEnd - 1, chunkOf(seenHi));
      }
    }
    for (int64_t at = first; at <= last; ++at) {
      const int64_t keyBegin = single ? at : keyOf(at), keyEnd = single ? at + 1 : keyOf(at + 1);
      if (keyBegin >= keyEnd || keyEnd <= seenLo || keyBegin > seenHi) continue;
      for (int64_t i0 = 0; i0 < sq; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, sq - i0);
        o.resize(size_t(rows * dimV));
        rowMax.resize(size_t(rows));
        rowSum.resize(size_t(rows));
        attendRows<S>(p, seq, buf, b, h, i0, rows, keyBegin, keyEnd, o.data(), rowMax.data(), rowSum.data());
        for (int64_t r = 0; r < rows; ++r)
          foldState(dimV, rowMax[size_t(r)], rowSum[size_t(r)], &o[size_t(r * dimV)], groupMax + i0 + r,
                    groupSum + i0 + r, groupO + (i0 + r) * dimV);
      }
    }
  });
  const int64_t rowsPerGroup = p.batch * p.heads * p.seqQ;  // bounded by O's span, checked by the problem builder
  parallelFor(heads, [&](int64_t item) {
    const int64_t h = item % p.heads, b = item / p.heads;
    const int64_t firstRow = (b * p.heads + h) * p.seqQ;
    thread_local std::vector<Acc> o;
    o.resize(size_t(dimV));
    for (int64_t i = 0; i < seq.queryRows(b); ++i) {
      Acc max = kNegInf, sum = 0.0, lse = kNegInf;
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t row = g * rowsPerGroup + firstRow + i;
        foldState(dimV, stateMax[row], stateSum[row], stateO + row * dimV, &max, &sum, o.data());
      }
      // The sink joins once, after every chunk: not once per chunk or group.
      if (seq.hasSinks()) foldSink(dimV, seq.sink(h), &max, &sum, o.data());
      normalizeRows(1, dimV, &max, &sum, o.data(), &lse);
      storeRow<S>(buf.o, seq.queryOffset(p.o, b, h, i), dimV, o.data());
      if (p.hasLse) buf.lse[seq.queryOffset(p.lse, b, h, i)] = float(lse);
    }
  });
}

template <class S>
void mergeTyped(const MergeProblem &p, const MergeBuffers &buf) {
  const int64_t dimV = p.headDimV;
  const int64_t *so = p.partialOStride, *sl = p.partialLseStride;
  parallelFor(mulOr(p.batch, p.heads, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems), [&](int64_t item) {
    const int64_t h = item % p.heads, b = item / p.heads;
    thread_local std::vector<Acc> o;
    o.resize(size_t(dimV));
    for (int64_t i = 0; i < p.seqQ; ++i) {
      const Acc lse = mergeRow(p.states, buf.partialO + b * so[1] + h * so[2] + i * so[3], so[0],
                               buf.partialLse + b * sl[1] + h * sl[2] + i * sl[3], sl[0], dimV, o.data());
      storeRow<S>(buf.o, b * p.o.batch + h * p.o.head + i * p.o.row, dimV, o.data());
      if (p.hasLse) buf.lse[b * p.lse.batch + h * p.lse.head + i * p.lse.row] = float(lse);
    }
  });
}

// Backward in two passes that each own their outputs, so no sum is ever split between threads:
//   pass 1, per (b, h, block of query rows): D_i = dO_i . O_i and dQ_i = sum_j dS_ij K_j;
//   pass 2, per (b, kvHead, tile of keys): dV_j = sum_{h in group, i} P_ij dO_i and dK_j = sum dS_ij Q_i,
// with P_ij = exp(logit_ij - LSE_i) from the forward's LSE and dS_ij = P_ij (dO_i . V_j - D_i) d logit / d dot.
template <class S>
void backwardTyped(const AttnProblem &p, const Extents &ext, const AttnBuffers &buf, void *workspace) {
  const Sequences seq(p);
  const int64_t dim = p.headDim, dimV = p.headDimV;
  // D of (b, h, i) at (queryToken * heads + h), queryToken = cuSeqlensQ[b] + i (ragged) or b * seqQ + i, in the
  // workspace (backwardWorkspaceBytes): every entry a pass-2 item reads is written by pass 1 first.
  Acc *rowDot = static_cast<Acc *>(workspace);
  auto rowDotIndex = [&](int64_t b, int64_t h, int64_t i) {
    return size_t(((p.ragged ? p.cuSeqlensQ[b] : b * p.seqQ) + i) * p.heads + h);
  };

  const int64_t blocks = ceilDiv(ext.maxQueryRows, kRowBlock);
  const int64_t heads = mulOr(p.batch, p.heads, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems);
  parallelFor(mulOr(heads, blocks, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems), [&](int64_t item) {
    const int64_t block = item % blocks, h = (item / blocks) % p.heads, b = item / (blocks * p.heads);
    const int64_t i0 = block * kRowBlock, sq = seq.queryRows(b), sk = seq.keyRows(b);
    if (i0 >= sq) return;
    const int64_t rows = std::min(kRowBlock, sq - i0);
    const int64_t kvHead = seq.kvHeadOf(h);
    const Acc slope = seq.alibiSlope(b, h);
    thread_local std::vector<Acc> q, dO, o, dQ, lse, keyT, valueT, keyRows, logits, deriv, dP;
    thread_local std::vector<KeyRange> ranges;
    q.resize(size_t(rows * dim));
    dQ.assign(size_t(rows * dim), 0.0);
    dO.resize(size_t(rows * dimV));
    o.resize(size_t(dimV));
    lse.resize(size_t(rows));
    keyT.resize(size_t(dim * kKeyTile));
    valueT.resize(size_t(dimV * kKeyTile));
    keyRows.resize(size_t(kKeyTile * dim));
    logits.resize(size_t(kKeyTile));
    deriv.resize(size_t(kKeyTile));
    dP.resize(size_t(kKeyTile));
    ranges.resize(size_t(rows));

    int64_t unionLo = sk, unionHi = -1;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      loadRow<S>(buf.q, seq.queryOffset(p.q, b, h, i), dim, &q[size_t(r * dim)]);
      loadRow<S>(buf.dO, seq.queryOffset(p.dO, b, h, i), dimV, &dO[size_t(r * dimV)]);
      loadRow<S>(buf.o, seq.queryOffset(p.o, b, h, i), dimV, o.data());
      Acc d = 0.0;
      for (int64_t e = 0; e < dimV; ++e) d += dO[size_t(r * dimV + e)] * o[size_t(e)];
      rowDot[rowDotIndex(b, h, i)] = d;
      lse[size_t(r)] = buf.lse[seq.queryOffset(p.lse, b, h, i)];
      KeyRange range = seq.visible(i, sq, sk, 0, sk);
      if (lse[size_t(r)] == kNegInf) range = KeyRange{0, -1};  // the forward saw no key: zero gradient
      ranges[size_t(r)] = range;
      if (range.lo <= range.hi) {
        unionLo = std::min(unionLo, range.lo);
        unionHi = std::max(unionHi, range.hi);
      }
    }

    for (int64_t j0 = unionLo; j0 <= unionHi; j0 += kKeyTile) {
      const int64_t n = std::min(kKeyTile, unionHi + 1 - j0);
      loadTileTransposed<S>(seq, buf.k, p.k, b, kvHead, j0, n, dim, keyT.data());
      loadTileTransposed<S>(seq, buf.v, p.v, b, kvHead, j0, n, dimV, valueT.data());
      loadTileRows<S>(seq, buf.k, p.k, b, kvHead, j0, n, dim, keyRows.data());
      for (int64_t r = 0; r < rows; ++r) {
        const KeyRange range = ranges[size_t(r)];
        if (range.lo > range.hi || range.hi < j0 || range.lo >= j0 + n) continue;
        const int64_t begin = std::max<int64_t>(range.lo - j0, 0), end = std::min<int64_t>(range.hi - j0 + 1, n);
        const int64_t i = i0 + r;
        dotTile(&q[size_t(r * dim)], keyT.data(), dim, logits.data());
        finishLogits(p, slope, alignedRow(i, sq, sk), j0, begin, end, logits.data(), deriv.data());
        dotTile(&dO[size_t(r * dimV)], valueT.data(), dimV, dP.data());
        const Acc d = rowDot[rowDotIndex(b, h, i)];
        Acc *dq = &dQ[size_t(r * dim)];
        for (int64_t jj = begin; jj < end; ++jj) {
          const Acc prob = std::exp(logits[size_t(jj)] - lse[size_t(r)]);
          const Acc dS = prob * (dP[size_t(jj)] - d) * deriv[size_t(jj)];
          const Acc *k = &keyRows[size_t(jj * dim)];
          for (int64_t e = 0; e < dim; ++e) dq[e] += dS * k[e];
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      storeRow<S>(buf.dQ, seq.queryOffset(p.dQ, b, h, i0 + r), dim, &dQ[size_t(r * dim)]);
  });

  // dSinks[h] = -sum over b, i of exp(s_h - LSE_i) D_i, from the D that pass 1 left in the workspace: one item per
  // head sums its rows in the order (b, i), so the result does not depend on the thread count. Written, never added.
  if (p.dSinks) {
    parallelFor(p.heads, [&](int64_t h) {
      const Acc sink = seq.sink(h);
      Acc sum = 0.0;
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t i = 0; i < seq.queryRows(b); ++i) {
          const Acc lse = buf.lse[seq.queryOffset(p.lse, b, h, i)];
          if (lse == kNegInf) continue;  // only with a sink of -inf: no weight on it
          sum -= std::exp(sink - lse) * rowDot[rowDotIndex(b, h, i)];
        }
      p.dSinks[h] = float(sum);
    });
  }

  // Key tiles per sequence: enough for the longest sequence's owned rows actually present.
  const int64_t tiles = ceilDiv(ext.maxOwnedKeyRows, kKeyTile);
  const int64_t group = p.heads / p.kvHeads;
  const int64_t kvHeads = mulOr(p.batch, p.kvHeads, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems);
  parallelFor(mulOr(kvHeads, tiles, FLASHATTN_STATUS_NOT_SUPPORTED, kTooManyItems), [&](int64_t item) {
    const int64_t tile = item % tiles, kvHead = (item / tiles) % p.kvHeads, b = item / (tiles * p.kvHeads);
    const int64_t j0 = tile * kKeyTile, owned = seq.keyRowsOwned(b);
    if (j0 >= owned) return;
    const int64_t n = std::min(kKeyTile, owned - j0);
    const int64_t sq = seq.queryRows(b), sk = seq.keyRows(b);
    const int64_t used = std::clamp<int64_t>(sk - j0, 0, n);  // keys past the used length get zero gradient
    thread_local std::vector<Acc> dK, dV, keyT, valueT, q, dO, logits, deriv, dP;
    dK.assign(size_t(kKeyTile * dim), 0.0);
    dV.assign(size_t(kKeyTile * dimV), 0.0);
    keyT.resize(size_t(dim * kKeyTile));
    valueT.resize(size_t(dimV * kKeyTile));
    q.resize(size_t(dim));
    dO.resize(size_t(dimV));
    logits.resize(size_t(kKeyTile));
    deriv.resize(size_t(kKeyTile));
    dP.resize(size_t(kKeyTile));
    // Only the rows that see a key of this tile contribute to it.
    const RowRange seeing =
        used > 0 ? rowsOfKeys(p.mask, p.windowLeft, p.windowRight, j0, j0 + used - 1, sq, sk) : RowRange{0, -1};
    if (seeing.lo <= seeing.hi) {
      loadTileTransposed<S>(seq, buf.k, p.k, b, kvHead, j0, used, dim, keyT.data());
      loadTileTransposed<S>(seq, buf.v, p.v, b, kvHead, j0, used, dimV, valueT.data());
      for (int64_t h = kvHead * group; h < (kvHead + 1) * group; ++h) {
        const Acc slope = seq.alibiSlope(b, h);
        for (int64_t i = seeing.lo; i <= seeing.hi; ++i) {
          const KeyRange range = seq.visible(i, sq, sk, j0, j0 + used);
          if (range.lo > range.hi) continue;
          const Acc lse = buf.lse[seq.queryOffset(p.lse, b, h, i)];
          if (lse == kNegInf) continue;
          const int64_t begin = range.lo - j0, end = range.hi - j0 + 1;
          loadRow<S>(buf.q, seq.queryOffset(p.q, b, h, i), dim, q.data());
          loadRow<S>(buf.dO, seq.queryOffset(p.dO, b, h, i), dimV, dO.data());
          dotTile(q.data(), keyT.data(), dim, logits.data());
          finishLogits(p, slope, alignedRow(i, sq, sk), j0, begin, end, logits.data(), deriv.data());
          dotTile(dO.data(), valueT.data(), dimV, dP.data());
          const Acc d = rowDot[rowDotIndex(b, h, i)];
          for (int64_t jj = begin; jj < end; ++jj) {
            const Acc prob = std::exp(logits[size_t(jj)] - lse);
            const Acc dS = prob * (dP[size_t(jj)] - d) * deriv[size_t(jj)];
            Acc *dv = &dV[size_t(jj * dimV)];
            for (int64_t e = 0; e < dimV; ++e) dv[e] += prob * dO[size_t(e)];
            Acc *dk = &dK[size_t(jj * dim)];
            for (int64_t e = 0; e < dim; ++e) dk[e] += dS * q[size_t(e)];
          }
        }
      }
    }
    for (int64_t jj = 0; jj < n; ++jj) {
      storeRow<S>(buf.dK, seq.keyOffset(p.dK, b, kvHead, j0 + jj), dim, &dK[size_t(jj * dim)]);
      storeRow<S>(buf.dV, seq.keyOffset(p.dV, b, kvHead, j0 + jj), dimV, &dV[size_t(jj * dimV)]);
    }
  });
}

void checkPrefixSums(const char *name, const int32_t *cu, int64_t batch, int64_t totalRows, const char *tensor,
                     int64_t maxLength, const char *maxName, const char *what) {
  require(cu[0] == 0, name, "[0] = ", cu[0], ": cu_seqlens must start at 0");
  for (int64_t b = 0; b < batch; ++b) {
    require(cu[b + 1] >= cu[b], name, "[", b + 1, "] = ", cu[b + 1], " is less than ", name, "[", b, "] = ", cu[b],
            ": cu_seqlens must be non-decreasing");
    const int64_t length = int64_t(cu[b + 1]) - cu[b];
    require(length <= maxLength, "sequence ", b, " has ", length, " ", what, " (", name, "[", b + 1, "] - ", name, "[",
            b, "]) but ", maxName, " is ", maxLength);
  }
  require(cu[batch] <= totalRows, name, "[", batch, "] = ", cu[batch], " exceeds the ", totalRows, " tokens of ",
          tensor);
}

}  // namespace

Extents validateIndexArrays(const AttnProblem &p) {
  if (p.ragged) {
    require(p.cuSeqlensQ != nullptr, "cuSeqlensQ is NULL in ragged mode");
    checkPrefixSums("cuSeqlensQ", p.cuSeqlensQ, p.batch, p.totalQ, "Q", p.seqQ, "maxSeqlenQ", "query tokens");
    if (p.cuSeqlensK && !p.paged)
      checkPrefixSums("cuSeqlensK", p.cuSeqlensK, p.batch, p.totalK, "K", p.seqK, "maxSeqlenK", "key tokens");
  }
  if (p.seqlensK) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t used = p.seqlensK[b];
      require(used >= 0 && used <= p.seqK, "seqlensK[", b, "] = ", used, " is outside [0, ", p.seqK,
              "] (the key rows of the cache)");
      if (p.ragged && p.cuSeqlensK && !p.paged) {
        const int64_t owned = int64_t(p.cuSeqlensK[b + 1]) - p.cuSeqlensK[b];
        require(used <= owned, "seqlensK[", b, "] = ", used, " exceeds the ", owned, " key tokens of sequence ", b,
                " (cuSeqlensK[", b + 1, "] - cuSeqlensK[", b, "])");
      }
    }
  }
  if (p.paged) {
    require(p.blockTable != nullptr, "blockTable is NULL for a paged cache");
    const Sequences seq(p);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t pages = ceilDiv(seq.keyRows(b), p.pageSize);
      for (int64_t t = 0; t < pages; ++t) {
        const int64_t page = p.blockTable[b * p.maxPagesPerSeq + t];
        require(page >= 0 && page < p.numPages, "blockTable[", b, "][", t, "] = ", page, " is outside [0, ", p.numPages,
                ") (numPages of the paged cache)");
      }
    }
  }
  // The lengths actually present, now that the arrays are known to be consistent.
  Extents ext;
  if (!p.ragged) {
    ext.maxQueryRows = p.seqQ;
    ext.maxOwnedKeyRows = p.seqK;
    return ext;
  }
  const Sequences seq(p);
  for (int64_t b = 0; b < p.batch; ++b) {
    ext.maxQueryRows = std::max(ext.maxQueryRows, seq.queryRows(b));
    ext.maxOwnedKeyRows = std::max(ext.maxOwnedKeyRows, seq.keyRowsOwned(b));
  }
  return ext;
}

int32_t decodeChunkCount(const AttnProblem &p) {
  if (p.numChunks > 0) return p.numChunks;
  // One chunk per 4096 cache rows, as many as 64: enough parallel items for the pool, few partial states.
  const int64_t chunks = std::clamp<int64_t>(ceilDiv(p.seqK, 4096), 1, 64);
  return int32_t(chunks);
}

DecodeWorkspace decodeWorkspace(const AttnProblem &p, int32_t chunks) {
  // A workspace that cannot be addressed cannot be given: NOT_SUPPORTED, never a wrapped size.
  const auto bytes = [&](std::initializer_list<int64_t> factors) {
    return alignWorkspace(bytesOr(factors, FLASHATTN_STATUS_NOT_SUPPORTED, "the HOST decode workspace (",
                                  std::min<int64_t>(chunks, kMaxDecodeGroups), " groups of ", p.batch, " x ", p.heads,
                                  " x ", p.seqQ, " rows of ", p.headDimV, " doubles) exceeds 2^62 bytes"));
  };
  DecodeWorkspace w;
  w.groups = std::min<int64_t>(std::max<int32_t>(chunks, 1), kMaxDecodeGroups);
  const std::size_t oBytes = bytes({w.groups, p.batch, p.heads, p.seqQ, p.headDimV, int64_t(sizeof(Acc))});
  const std::size_t statBytes = bytes({w.groups, p.batch, p.heads, p.seqQ, int64_t(sizeof(Acc))});
  const auto sum = [&](std::size_t a, std::size_t b) {
    return bytesSumOr(a, b, FLASHATTN_STATUS_NOT_SUPPORTED, "the HOST decode workspace exceeds 2^62 bytes");
  };
  w.oOffset = 0;
  w.maxOffset = oBytes;
  w.sumOffset = sum(w.maxOffset, statBytes);
  w.totalBytes = sum(w.sumOffset, statBytes);
  return w;
}

std::size_t backwardWorkspaceBytes(const AttnProblem &p) {
  const int64_t queryTokens = p.ragged ? p.totalQ : p.batch * p.seqQ;  // both bounded by Q's checked span
  return alignWorkspace(bytesOr({queryTokens, p.heads, int64_t(sizeof(Acc))}, FLASHATTN_STATUS_NOT_SUPPORTED,
                                "the HOST backward workspace (", queryTokens, " x ", p.heads,
                                " doubles) exceeds 2^62 bytes"));
}

namespace {

// Calls body(Storage{}) with the storage type of t, so each operation is compiled once per type.
template <class Body>
void withStorage(DType t, Body &&body) {
  switch (t) {
    case DType::FP16: return body(Fp16Storage{});
    case DType::BF16: return body(Bf16Storage{});
    case DType::FP32: return body(Fp32Storage{});
  }
  fail(FLASHATTN_STATUS_INTERNAL_ERROR, "unknown data type ", int(t));
}

}  // namespace

void forward(const AttnProblem &p, const Extents &ext, const AttnBuffers &buf) {
  withStorage(p.dtype, [&](auto storage) { forwardTyped<decltype(storage)>(p, ext, buf); });
}

void backward(const AttnProblem &p, const Extents &ext, const AttnBuffers &buf, void *workspace) {
  withStorage(p.dtype, [&](auto storage) { backwardTyped<decltype(storage)>(p, ext, buf, workspace); });
}

void decode(const AttnProblem &p, int32_t chunks, const DecodeWorkspace &layout, const AttnBuffers &buf,
            void *workspace) {
  withStorage(p.dtype, [&](auto storage) { decodeTyped<decltype(storage)>(p, chunks, layout, buf, workspace); });
}

void merge(const MergeProblem &p, const MergeBuffers &buf) {
  withStorage(p.outType, [&](auto storage) { mergeTyped<decltype(storage)>(p, buf); });
}

}  // namespace flashattn::host
