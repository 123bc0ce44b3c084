// SPDX-License-Identifier: BSD-3-Clause
// flashattn-bench: times libflashattn's forward, backward and split-KV decode, checks every result on the same inputs
// (CUDA results against the HOST backend, HOST results against the float64 oracle of oracle.cpp, since a backend
// checked against itself proves nothing), and writes rows that bench/report.py joins with the peers' figures.
//
// Only the public API is used (plus the CUDA runtime for buffers and events when the build has CUDA), so this file
// is also a worked example of calling the library.
//
// Correctness: the reference is slow, so for big shapes it runs on a slice that shares the host copy of the
// inputs through strided descriptors: the last batch, all heads or (when that leaves too few rows) two query heads,
// or one KV head with its whole query group where dK/dV need it, and a subset of query rows or keys chosen so the
// host work stays within --check-gflop.
// Causal masks are bottom-right aligned, which is what lets a slice of the LAST rows (or the last keys) keep exactly
// the visibility of the full problem; without a mask the slice spreads over the whole sequence instead.

#include <flashattn/flashattn.h>

#include "oracle.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(FLASHATTN_BENCH_CUDA)
#include <cuda_runtime.h>
#endif

namespace {

// ---------------------------------------------------------------------------------------------------------------------
// Errors

// A failed library call; NOT_SUPPORTED is reported as such and does not fail the run.
struct ApiError : std::runtime_error {
  flashAttnStatus_t status;
  ApiError(flashAttnStatus_t s, const std::string &text) : std::runtime_error(text), status(s) {}
};

std::string lastLibraryMessage() {
  char buf[2048];
  flashAttnGetLastErrorMessage(buf, sizeof buf);
  return buf;
}

void apiCheck(flashAttnStatus_t status, const char *what) {
  if (status == FLASHATTN_STATUS_SUCCESS) return;
  throw ApiError(status, std::string(what) + ": " + flashAttnGetErrorString(status) + ": " + lastLibraryMessage());
}

#if defined(FLASHATTN_BENCH_CUDA)
void cudaCheck(cudaError_t err, const char *what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}
#endif

// ---------------------------------------------------------------------------------------------------------------------
// Storage types

size_t elementBytes(flashAttnDataType_t t) { return t == FLASHATTN_DATA_FP32 ? 4 : 2; }

const char *dtypeName(flashAttnDataType_t t) {
  switch (t) {
    case FLASHATTN_DATA_FP16:
      return "fp16";
    case FLASHATTN_DATA_BF16:
      return "bf16";
    default:
      return "fp32";
  }
}

// Normwise gates of docs/testing.md; the reference result is rounded to the same storage type as ours.
double normwiseGate(flashAttnDataType_t t) {
  switch (t) {
    case FLASHATTN_DATA_BF16:
      return 5e-3;
    case FLASHATTN_DATA_FP16:
      return 6e-4;
    default:
      return 1e-5;
  }
}
constexpr double kLseGate = 1e-4;

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t toBf16(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
}
float fromBf16(uint16_t h) { return bitsToFloat(uint32_t(h) << 16); }

uint16_t toFp16(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // 65520 and up round to infinity
  if (a < 0x38800000u) {
    // Subnormal: the value is m * 2^-24; scaling by 2^24 is exact and nearbyint rounds to nearest even.
    return uint16_t(sign | uint16_t(std::nearbyint(bitsToFloat(a) * 16777216.0f)));
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return uint16_t(sign | uint16_t((r - (112u << 23)) >> 13));
}
float fromFp16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(float(m), -24);
  if (e == 31) return bitsToFloat(sign | 0x7f800000u | (m << 13));
  return bitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

double loadElement(const uint8_t *base, flashAttnDataType_t t, int64_t index) {
  if (t == FLASHATTN_DATA_FP32) {
    float f;
    std::memcpy(&f, base + index * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, base + index * 2, 2);
  return t == FLASHATTN_DATA_BF16 ? fromBf16(h) : fromFp16(h);
}

void storeElement(uint8_t *base, flashAttnDataType_t t, int64_t index, float value) {
  if (t == FLASHATTN_DATA_FP32) {
    std::memcpy(base + index * 4, &value, 4);
    return;
  }
  const uint16_t h = t == FLASHATTN_DATA_BF16 ? toBf16(value) : toFp16(value);
  std::memcpy(base + index * 2, &h, 2);
}

// ---------------------------------------------------------------------------------------------------------------------
// Host memory, aligned like device memory (the library wants element alignment, workspaces 256 bytes)

class HostBlock {
 public:
  HostBlock() = default;
  explicit HostBlock(size_t bytes) : bytes_(bytes) {
    const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
    ptr_ = static_cast<uint8_t *>(std::aligned_alloc(256, rounded));
    if (!ptr_) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
  }
  ~HostBlock() { std::free(ptr_); }
  HostBlock(HostBlock &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  HostBlock &operator=(HostBlock &&o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  HostBlock(const HostBlock &) = delete;
  HostBlock &operator=(const HostBlock &) = delete;
  uint8_t *data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  uint8_t *ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---------------------------------------------------------------------------------------------------------------------
// Memory of the benchmarked handle: device memory on CUDA, host memory on HOST
//
// Every copy and fill goes on the stream the library works on, so it is ordered with the library's kernels (a plain
// cudaMemcpy from pageable memory may return before its DMA lands, and the legacy stream does not order with a
// non-blocking one).

class Memory {
 public:
  explicit Memory(bool cuda) : cuda_(cuda) {
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda_) cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
#endif
  }
  ~Memory() {
#if defined(FLASHATTN_BENCH_CUDA)
    if (stream_) cudaStreamDestroy(stream_);
#endif
  }
  Memory(const Memory &) = delete;
  Memory &operator=(const Memory &) = delete;
  bool cuda() const { return cuda_; }
#if defined(FLASHATTN_BENCH_CUDA)
  cudaStream_t stream() const { return stream_; }
#endif

  void *allocate(size_t bytes) {
    if (bytes == 0) return nullptr;
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda_) {
      void *p = nullptr;
      cudaCheck(cudaMalloc(&p, bytes), ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
      return p;
    }
#endif
    const size_t rounded = (bytes + 255) / 256 * 256;
    void *p = std::aligned_alloc(256, rounded);
    if (!p) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void *p) {
    if (!p) return;
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda_) {
      cudaFree(p);
      return;
    }
#endif
    std::free(p);
  }
  void upload(void *dst, const void *src, size_t bytes) {
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda_) {
      cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync to the device");
      cudaCheck(cudaStreamSynchronize(stream_), "cudaMemcpyAsync to the device");  // `src` may go away next
      return;
    }
#endif
    std::memcpy(dst, src, bytes);
  }
  void download(void *dst, const void *src, size_t bytes) {
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda_) {
      cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync from the device");
      cudaCheck(cudaStreamSynchronize(stream_), "cudaMemcpyAsync from the device");
      return;
    }
#endif
    std::memcpy(dst, src, bytes);
  }
  // 0xFF bytes are NaN in every storage type: an element the library never writes fails the finiteness check.
  void poison(void *p, size_t bytes) {
    if (!p) return;
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda_) {
      cudaCheck(cudaMemsetAsync(p, 0xFF, bytes, stream_), "cudaMemsetAsync");
      return;
    }
#endif
    std::memset(p, 0xFF, bytes);
  }
  // Waits for the library's work; a kernel fault surfaces here.
  void synchronize() {
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda_) cudaCheck(cudaStreamSynchronize(stream_), "kernel execution");
#endif
  }

 private:
  bool cuda_;
#if defined(FLASHATTN_BENCH_CUDA)
  cudaStream_t stream_ = nullptr;
#endif
};

class Buffer {
 public:
  Buffer(Memory &mem, size_t bytes) : mem_(&mem), ptr_(mem.allocate(bytes)), bytes_(bytes) {}
  ~Buffer() {
    if (mem_) mem_->release(ptr_);
  }
  Buffer(Buffer &&o) noexcept : mem_(o.mem_), ptr_(o.ptr_), bytes_(o.bytes_) {
    o.mem_ = nullptr;
    o.ptr_ = nullptr;
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer &operator=(Buffer &&) = delete;
  void *get() const { return ptr_; }
  uint8_t *bytesPtr() const { return static_cast<uint8_t *>(ptr_); }
  size_t bytes() const { return bytes_; }
  void upload(const HostBlock &h) { mem_->upload(ptr_, h.data(), bytes_); }
  void poison() { mem_->poison(ptr_, bytes_); }
  HostBlock download() const {
    HostBlock h(bytes_);
    mem_->download(h.data(), ptr_, bytes_);
    return h;
  }

 private:
  Memory *mem_;
  void *ptr_;
  size_t bytes_;
};

// A copy of `values` (per-head sinks, ALiBi slopes) in the handle's memory.
std::unique_ptr<Buffer> uploadFloats(Memory &mem, const std::vector<float> &values) {
  HostBlock h(values.size() * 4);
  std::memcpy(h.data(), values.data(), h.bytes());
  auto buffer = std::make_unique<Buffer>(mem, h.bytes());
  buffer->upload(h);
  return buffer;
}

// ---------------------------------------------------------------------------------------------------------------------
// Strided views: a full tensor, or a slice of one that shares its storage

struct Pick {
  int64_t start = 0, count = 1, step = 1;
};

Pick allOf(int64_t n) { return Pick{0, n, 1}; }
// `want` indices spread over [0, n) ending at the last one, so offsets far from the start are exercised.
Pick spread(int64_t n, int64_t want) {
  if (want >= n) return allOf(n);
  const int64_t step = n / want;
  return Pick{n - 1 - (want - 1) * step, want, step};
}
// The last `want` indices: with bottom-right masks they see exactly the keys they see in the full problem.
Pick tail(int64_t n, int64_t want) {
  if (want >= n) return allOf(n);
  return Pick{n - want, want, 1};
}

struct View {
  int rank = 0;
  int64_t dims[5] = {};
  int64_t strides[5] = {};
  int64_t offset = 0;  // elements from the start of the storage

  static View dense(std::initializer_list<int64_t> d) {
    View v;
    v.rank = int(d.size());
    int i = 0;
    for (int64_t x : d) v.dims[i++] = x;
    int64_t s = 1;
    for (int j = v.rank - 1; j >= 0; --j) {
      v.strides[j] = s;
      s *= v.dims[j];
    }
    return v;
  }
  View pick(int axis, const Pick &p) const {
    View v = *this;
    v.offset += p.start * strides[axis];
    v.dims[axis] = p.count;
    if (p.count > 1) v.strides[axis] *= p.step;
    return v;
  }
  int64_t elements() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  // Elements from the storage start to one past the last addressed element.
  int64_t extent() const {
    int64_t e = offset + 1;
    for (int i = 0; i < rank; ++i) e += (dims[i] - 1) * strides[i];
    return e;
  }
  View compact() const {
    View v = *this;
    v.offset = 0;
    int64_t s = 1;
    for (int j = rank - 1; j >= 0; --j) {
      v.strides[j] = s;
      s *= dims[j];
    }
    return v;
  }
  template <typename F>
  void forEach(F &&f) const {  // f(offset of the element in storage, linear index in the view)
    int64_t idx[5] = {};
    const int64_t n = elements();
    for (int64_t lin = 0; lin < n; ++lin) {
      int64_t off = offset;
      for (int i = 0; i < rank; ++i) off += idx[i] * strides[i];
      f(off, lin);
      for (int i = rank - 1; i >= 0; --i) {
        if (++idx[i] < dims[i]) break;
        idx[i] = 0;
      }
    }
  }
};

enum class Layout { BHSD, BSHD };

// [batch, heads, seq, dim] in memory order BHSD (heads outer) or BSHD (tokens outer, heads interleaved).
View tensor4(Layout layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  View v;
  v.rank = 4;
  v.dims[0] = b;
  v.dims[1] = h;
  v.dims[2] = s;
  v.dims[3] = d;
  if (layout == Layout::BHSD) {
    v.strides[0] = h * s * d;
    v.strides[1] = s * d;
    v.strides[2] = d;
  } else {
    v.strides[0] = s * h * d;
    v.strides[1] = d;
    v.strides[2] = h * d;
  }
  v.strides[3] = 1;
  return v;
}

// ---------------------------------------------------------------------------------------------------------------------
// Descriptors (RAII)

class TensorDesc {
 public:
  TensorDesc(flashAttnDataType_t t, const View &v) {
    apiCheck(flashAttnCreateTensorDescriptor(&d_), "flashAttnCreateTensorDescriptor");
    int64_t strides[5];
    for (int i = 0; i < v.rank; ++i) strides[i] = v.dims[i] == 1 && i == v.rank - 1 ? 1 : v.strides[i];
    const flashAttnStatus_t s = flashAttnSetTensorDescriptor(d_, t, v.rank, v.dims, strides);
    if (s != FLASHATTN_STATUS_SUCCESS) {
      flashAttnDestroyTensorDescriptor(d_);
      apiCheck(s, "flashAttnSetTensorDescriptor");
    }
  }
  ~TensorDesc() { flashAttnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc &) = delete;
  TensorDesc &operator=(const TensorDesc &) = delete;
  operator flashAttnTensorDescriptor_t() const { return d_; }

 private:
  flashAttnTensorDescriptor_t d_ = nullptr;
};

class AttnDesc {
 public:
  // `sinks`, `dSinks` and `alibiSlopes` live in the memory of the handle the descriptor is used with.
  explicit AttnDesc(bool causal, bool deterministic = false, const float *sinks = nullptr, float *dSinks = nullptr,
                    float softcap = 0.f, const float *alibiSlopes = nullptr) {
    apiCheck(flashAttnCreateAttentionDescriptor(&d_), "flashAttnCreateAttentionDescriptor");
    flashAttnStatus_t s = FLASHATTN_STATUS_SUCCESS;
    const char *what = "";
    if (causal) {
      s = flashAttnSetAttentionMask(d_, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT);
      what = "flashAttnSetAttentionMask";
    }
    if (s == FLASHATTN_STATUS_SUCCESS && deterministic) {
      s = flashAttnSetAttentionDeterministic(d_, 1);
      what = "flashAttnSetAttentionDeterministic";
    }
    if (s == FLASHATTN_STATUS_SUCCESS && sinks) {
      s = flashAttnSetAttentionSinks(d_, sinks);
      what = "flashAttnSetAttentionSinks";
    }
    if (s == FLASHATTN_STATUS_SUCCESS && dSinks) {
      s = flashAttnSetAttentionSinksGradient(d_, dSinks);
      what = "flashAttnSetAttentionSinksGradient";
    }
    if (s == FLASHATTN_STATUS_SUCCESS && softcap > 0.f) {
      s = flashAttnSetAttentionSoftcap(d_, softcap);
      what = "flashAttnSetAttentionSoftcap";
    }
    if (s == FLASHATTN_STATUS_SUCCESS && alibiSlopes) {
      s = flashAttnSetAttentionAlibiSlopes(d_, alibiSlopes, 0);
      what = "flashAttnSetAttentionAlibiSlopes";
    }
    if (s != FLASHATTN_STATUS_SUCCESS) {
      flashAttnDestroyAttentionDescriptor(d_);
      apiCheck(s, what);
    }
  }
  ~AttnDesc() { flashAttnDestroyAttentionDescriptor(d_); }
  AttnDesc(const AttnDesc &) = delete;
  AttnDesc &operator=(const AttnDesc &) = delete;
  operator flashAttnAttentionDescriptor_t() const { return d_; }

 private:
  flashAttnAttentionDescriptor_t d_ = nullptr;
};

class SeqDesc {
 public:
  SeqDesc() { apiCheck(flashAttnCreateSeqDescriptor(&d_), "flashAttnCreateSeqDescriptor"); }
  ~SeqDesc() { flashAttnDestroySeqDescriptor(d_); }
  SeqDesc(const SeqDesc &) = delete;
  SeqDesc &operator=(const SeqDesc &) = delete;
  operator flashAttnSeqDescriptor_t() const { return d_; }

 private:
  flashAttnSeqDescriptor_t d_ = nullptr;
};

// ---------------------------------------------------------------------------------------------------------------------
// Random inputs

// normal(0, 1) from splitmix64 and Box-Muller: fast enough for gigabyte caches.
class NormalSource {
 public:
  explicit NormalSource(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  float next() {
    if (haveSpare_) {
      haveSpare_ = false;
      return spare_;
    }
    const double u1 = (double(bits() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]: log stays finite
    const double u2 = double(bits() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = float(r * std::sin(6.283185307179586 * u2));
    haveSpare_ = true;
    return float(r * std::cos(6.283185307179586 * u2));
  }
  uint64_t bits() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
  float spare_ = 0.f;
  bool haveSpare_ = false;
};

// Fills n elements. Beyond kRandomPeriod elements the block repeats: a period that is no multiple of any row, head
// or page size keeps neighbouring rows distinct while gigabyte decode caches fill in well under a second.
constexpr int64_t kRandomPeriod = (int64_t(1) << 22) + 1021;

void fillRandom(uint8_t *dst, flashAttnDataType_t t, int64_t n, uint64_t seed) {
  NormalSource rng(seed);
  const int64_t block = std::min(n, kRandomPeriod);
  for (int64_t i = 0; i < block; ++i) storeElement(dst, t, i, rng.next());
  const size_t es = elementBytes(t);
  for (int64_t done = block; done < n;) {
    const int64_t chunk = std::min(done, n - done);
    std::memcpy(dst + done * es, dst, size_t(chunk) * es);
    done += chunk;
  }
}

HostBlock randomTensor(flashAttnDataType_t t, int64_t elements, uint64_t seed) {
  HostBlock h(size_t(elements) * elementBytes(t));
  fillRandom(h.data(), t, elements, seed);
  return h;
}

// --sinks: one logit per query head in [-1, 1] from a 32-bit LCG (Numerical Recipes' constants), the same for every
// run and shape, so runs with and without sinks (and of two builds) see the same problem. Logits of this size keep
// the sink's weight comparable to a key's, so neither term vanishes from the check.
std::vector<float> sinkLogits(int64_t heads) {
  std::vector<float> out(static_cast<size_t>(heads));
  uint32_t state = 12345u;
  for (float &x : out) {
    state = state * 1664525u + 1013904223u;
    x = float(double(state >> 8) * 0x1.0p-24 * 2.0 - 1.0);
  }
  return out;
}
// The per-head values (sinks, ALiBi slopes) of the query heads a check slice picks, in the slice's head order; none
// where `all` is empty (no --sinks, no --alibi).
std::vector<float> pickPerHead(const std::vector<float> &all, const Pick &heads) {
  if (all.empty()) return {};
  std::vector<float> out(size_t(heads.count));
  for (int64_t i = 0; i < heads.count; ++i) out[size_t(i)] = all[size_t(heads.start + i * heads.step)];
  return out;
}

// --alibi: the ALiBi paper's slopes for H heads, 2^(-8 (h + 1) / H) (the geometric sequence it defines for a power of
// two; the same formula for any H).
std::vector<float> alibiSlopes(int64_t heads) {
  std::vector<float> out(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) out[size_t(h)] = float(std::exp2(-8.0 * double(h + 1) / double(heads)));
  return out;
}

// ---------------------------------------------------------------------------------------------------------------------
// Comparison

struct ErrorStats {
  double maxAbs = 0, diff2 = 0, ref2 = 0;
  int64_t nonFinite = 0, compared = 0;
  double normwise() const {
    if (nonFinite) return std::numeric_limits<double>::infinity();
    if (ref2 == 0) return diff2 == 0 ? 0 : std::numeric_limits<double>::infinity();
    return std::sqrt(diff2 / ref2);
  }
};

// ours is read at view `ov` of its storage, the HOST result at view `rv` of its own.
ErrorStats compare(const uint8_t *ours, const View &ov, const uint8_t *ref, const View &rv, flashAttnDataType_t t) {
  std::vector<int64_t> refOffsets(size_t(rv.elements()));
  rv.forEach([&](int64_t off, int64_t lin) { refOffsets[size_t(lin)] = off; });
  ErrorStats s;
  ov.forEach([&](int64_t off, int64_t lin) {
    const double a = loadElement(ours, t, off), b = loadElement(ref, t, refOffsets[size_t(lin)]);
    ++s.compared;
    if (!std::isfinite(a) || !std::isfinite(b)) {
      ++s.nonFinite;
      return;
    }
    s.maxAbs = std::max(s.maxAbs, std::fabs(a - b));
    s.diff2 += (a - b) * (a - b);
    s.ref2 += b * b;
  });
  return s;
}

// LSE: absolute error where both are finite; a row that is -inf on one side only is a mismatch.
struct LseStats {
  double maxAbs = 0;
  int64_t mismatched = 0;
};

LseStats compareLse(const float *ours, const View &ov, const float *ref, const View &rv) {
  std::vector<int64_t> refOffsets(size_t(rv.elements()));
  rv.forEach([&](int64_t off, int64_t lin) { refOffsets[size_t(lin)] = off; });
  LseStats s;
  ov.forEach([&](int64_t off, int64_t lin) {
    const float a = ours[off], b = ref[refOffsets[size_t(lin)]];
    if (std::isnan(a) || std::isnan(b)) {
      ++s.mismatched;
    } else if (std::isinf(a) || std::isinf(b)) {
      if (a != b) ++s.mismatched;
    } else {
      s.maxAbs = std::max(s.maxAbs, double(std::fabs(a - b)));
    }
  });
  return s;
}

// Copies the FP32 elements of a view into a dense block (the LSE descriptor needs a unit last stride, which a
// spread row slice does not have).
HostBlock gatherFloats(const float *src, const View &v) {
  HostBlock out(size_t(v.elements()) * 4);
  float *dst = reinterpret_cast<float *>(out.data());
  v.forEach([&](int64_t off, int64_t lin) { dst[lin] = src[off]; });
  return out;
}

bool sameBytes(const HostBlock &a, const HostBlock &b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// The oracle's side: the elements of a view in its index order, as doubles, and its results rounded to storage.
std::vector<double> gather(const uint8_t *base, const View &v, flashAttnDataType_t t) {
  std::vector<double> out(size_t(v.elements()));
  v.forEach([&](int64_t off, int64_t lin) { out[size_t(lin)] = loadElement(base, t, off); });
  return out;
}
void storeRounded(const std::vector<double> &values, uint8_t *dst, flashAttnDataType_t t) {
  for (size_t i = 0; i < values.size(); ++i) storeElement(dst, t, int64_t(i), float(values[i]));
}
void storeFloats(const std::vector<double> &values, uint8_t *dst) {
  float *f = reinterpret_cast<float *>(dst);
  for (size_t i = 0; i < values.size(); ++i) f[i] = float(values[i]);
}

// ---------------------------------------------------------------------------------------------------------------------
// Results

struct Row {
  std::string kind, op;  // prefill fwd|bwd|bwd-det (deterministic backward), decode decode
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t B = 0, H = 0, HK = 0, Sq = 0, Sk = 0, D = 0;
  int64_t Dv = 0;  // head dim of V and O (and dO, dV); D unless --dim-v or the mla sweep says otherwise
  bool vInK = false;  // decode: V is K's first Dv columns (same pointer, K's strides), as absorbed MLA stores it
  bool causal = false;
  bool sinks = false;  // --sinks: the call had attention sinks (and the backward computed dSinks)
  float softcap = 0.f;  // --softcap: the prefill calls' softcap (0: none)
  bool alibi = false;   // --alibi: the prefill calls had ALiBi slopes
  int32_t chunks = 0;
  int64_t pageSize = 0;
  bool pagesInOrder = false;  // --pages-in-order: the block table walks the pool in order (else shuffled)
  int64_t copies = 1;
  std::string kernel;
  double ms = NAN, tflops = NAN, kvGBps = NAN;
  double backToBackMs = NAN;  // mean of calls queued back to back (CUDA only)
  double hostUs = NAN;        // median wall time of the API call itself, on the host (CUDA only)
  bool checked = false, pass = false;
  double maxErr = NAN, normwise = NAN, lseErr = NAN, checkSeconds = 0;
  int deterministic = -1;  // 1/0: the output after the timed calls is bitwise the checked one; -1: not looked at
  std::string reference;   // what the result was checked against
  std::string checkScope, error;
  bool notSupported = false;
};

// Forward and decode promise bitwise equal results run to run (docs/semantics.md): the output left by the last
// timed call must be the one that was checked.
void checkRepeatable(Row &row, const HostBlock &checkedO, const HostBlock &checkedLse, const Buffer &o,
                     const Buffer &lse) {
  row.deterministic = sameBytes(checkedO, o.download()) && sameBytes(checkedLse, lse.download());
  if (!row.deterministic) {
    row.pass = false;
    row.checkScope += "; the output of the last timed call differs bitwise from the checked one";
  }
}

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
std::string jsonNumber(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string rowJson(const Row &r) {
  std::string j = "{\"kind\": " + jsonString(r.kind) + ", \"op\": " + jsonString(r.op) +
                  ", \"dtype\": " + jsonString(dtypeName(r.dtype)) + ", \"D\": " + std::to_string(r.D) +
                  ", \"Dv\": " + std::to_string(r.Dv);
  if (r.kind == "decode") {
    j += ", \"S\": " + std::to_string(r.Sk) + ", \"L\": " + std::to_string(r.Sk) + ", \"Sq\": " + std::to_string(r.Sq);
  } else {
    j += ", \"S\": " + std::to_string(r.Sq) + ", \"Sk\": " + std::to_string(r.Sk);
  }
  j += ", \"B\": " + std::to_string(r.B) + ", \"H\": " + std::to_string(r.H) + ", \"HK\": " + std::to_string(r.HK) +
       ", \"causal\": " + (r.causal ? "true" : "false") + ", \"sinks\": " + (r.sinks ? "true" : "false");
  if (r.kind == "decode") {
    j += ", \"chunks\": " + std::to_string(r.chunks) + ", \"page_size\": " + std::to_string(r.pageSize) +
         ", \"copies\": " + std::to_string(r.copies);
    if (r.pagesInOrder) j += ", \"pages_in_order\": true";
    if (r.vInK) j += ", \"v_aliases_k\": true";
  }
  if (r.kind == "chunked") j += ", \"page_size\": " + std::to_string(r.pageSize);
  if (r.softcap > 0.f) j += ", \"softcap\": " + jsonNumber(r.softcap);
  if (r.alibi) j += ", \"alibi\": true";
  if (!r.error.empty()) {
    j += ", \"error\": " + jsonString(r.error) + ", \"not_supported\": " + (r.notSupported ? "true" : "false");
  } else {
    j += ", \"ms\": " + jsonNumber(r.ms);
    if (std::isfinite(r.backToBackMs)) j += ", \"ms_back_to_back\": " + jsonNumber(r.backToBackMs);
    if (std::isfinite(r.hostUs)) j += ", \"host_us\": " + jsonNumber(r.hostUs);
    if (r.kind == "decode") j += ", \"kv_GBps\": " + jsonNumber(r.kvGBps);
    // Absorbed-MLA decode does ~240 FLOP per KV byte at 128 heads (GQA 32/8 at head dim 128: 4), so the tensor cores
    // may bound it before the stream does: its rows carry both figures.
    if (r.kind != "decode" || r.Dv != r.D) j += ", \"tflops\": " + jsonNumber(r.tflops);
  }
  if (!r.kernel.empty()) j += ", \"kernel\": " + jsonString(r.kernel);
  if (r.checked) {
    j += ", \"max_err\": " + jsonNumber(r.maxErr) + ", \"normwise\": " + jsonNumber(r.normwise);
    if (std::isfinite(r.lseErr)) j += ", \"lse_err\": " + jsonNumber(r.lseErr);
    j += ", \"pass\": " + std::string(r.pass ? "true" : "false") + ", \"reference\": " + jsonString(r.reference) +
         ", \"check\": " + jsonString(r.checkScope);
    if (r.deterministic >= 0) j += std::string(", \"deterministic\": ") + (r.deterministic ? "true" : "false");
  } else if (r.error.empty()) {
    j += ", \"pass\": null";
  }
  return j + "}";
}

std::string shapeText(const Row &r) {
  char buf[256];
  if (r.kind == "decode") {
    // "D=576/512 V=K" for absorbed MLA; rows of one head dim keep the text they always had.
    const std::string dims =
        std::to_string(r.D) + (r.Dv != r.D ? "/" + std::to_string(r.Dv) : "") + (r.vInK ? " V=K" : "");
    std::snprintf(buf, sizeof buf, "decode %s B=%lld H=%lld/%lld Sq=%lld L=%lld D=%s%s%s%s%s", dtypeName(r.dtype),
                  (long long)r.B, (long long)r.H, (long long)r.HK, (long long)r.Sq, (long long)r.Sk, dims.c_str(),
                  r.causal ? " causal" : "", r.sinks ? " sinks" : "",
                  r.pageSize ? (" page=" + std::to_string(r.pageSize) + (r.pagesInOrder ? " in-order" : "")).c_str() : "",
                  r.chunks ? (" chunks=" + std::to_string(r.chunks)).c_str() : "");
  } else if (r.kind == "chunked") {
    const std::string dv = r.Dv != r.D ? "/" + std::to_string(r.Dv) : "";
    std::snprintf(buf, sizeof buf, "chunked %s B=%lld H=%lld/%lld new=%lld keys=%lld D=%lld%s%s %s", dtypeName(r.dtype),
                  (long long)r.B, (long long)r.H, (long long)r.HK, (long long)r.Sq, (long long)r.Sk, (long long)r.D,
                  dv.c_str(), r.causal ? " causal" : "",
                  r.pageSize ? ("page=" + std::to_string(r.pageSize)).c_str() : "dense cache");
  } else {
    // "D=192/128" where V/O's head dim differs; rows of one head dim keep the text they always had.
    const std::string dims = std::to_string(r.D) + (r.Dv != r.D ? "/" + std::to_string(r.Dv) : "");
    const std::string logits =
        (r.softcap > 0.f ? " softcap=" + jsonNumber(r.softcap) : "") + (r.alibi ? " alibi" : "");
    std::snprintf(buf, sizeof buf, "%-3s %s B=%lld H=%lld/%lld S=%lld/%lld D=%s%s%s%s", r.op.c_str(),
                  dtypeName(r.dtype), (long long)r.B, (long long)r.H, (long long)r.HK, (long long)r.Sq, (long long)r.Sk,
                  dims.c_str(), r.causal ? " causal" : "", r.sinks ? " sinks" : "", logits.c_str());
  }
  return buf;
}

std::string resultText(const Row &r) {
  char buf[512];
  if (!r.error.empty()) {
    std::snprintf(buf, sizeof buf, "%s %s", r.notSupported ? "NOT_SUPPORTED" : "ERROR", r.error.c_str());
    return buf;
  }
  std::string perf;
  if (r.kind == "decode" && r.Dv != r.D)
    std::snprintf(buf, sizeof buf, "%9.4f ms %8.4g GB/s %7.4g TFLOP/s", r.ms, r.kvGBps, r.tflops);
  else if (r.kind == "decode")
    std::snprintf(buf, sizeof buf, "%9.4f ms %8.4g GB/s", r.ms, r.kvGBps);
  else
    std::snprintf(buf, sizeof buf, "%9.4f ms %7.4g TFLOP/s", r.ms, r.tflops);
  perf = buf;
  if (!r.checked) return perf + "  not checked";
  std::snprintf(buf, sizeof buf, "  max_err %.2e normwise %.2e%s %s against the %s", r.maxErr, r.normwise,
                std::isfinite(r.lseErr) ? (" lse " + std::string(jsonNumber(r.lseErr))).c_str() : "",
                r.pass ? "PASS" : "FAIL", r.reference.c_str());
  return perf + buf;
}

// ---------------------------------------------------------------------------------------------------------------------
// Options

struct Options {
  std::string op = "all";
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  bool dtypeGiven = false;
  // 0 = not given: resolveShape() fills in defaults that suit the backend.
  int64_t batch = 0, heads = 0, kvHeads = 0, seq = 0, seqK = 0, dim = 0, qTokens = 1;
  int64_t dimV = 0;  // head dim of V and O; 0 = --dim's
  bool causal = false;
  int32_t chunks = 0;
  int64_t pageSize = 0;
  bool pagesInOrder = false;  // paged decode: the identity block table instead of a shuffled one
  int iters = -1, warmup = -1;
  std::string json;
  std::string sweep;
  Layout layout = Layout::BHSD;
  double checkGflop = 2.0;
  bool check = true;
  bool deterministic = false;  // prefill: also time the deterministic backward (rows "bwd-det")
  bool sinks = false;          // every call with attention sinks, every backward with dSinks
  float softcap = 0.f;         // every prefill call with this softcap (0: none)
  bool alibi = false;          // every prefill call with ALiBi slopes
  std::string backend = "auto";
  int device = -1;
  bool demo = true;  // until an option names a shape, an operation or a sweep
  bool list = false;  // --list: print the planned rows and run none
};

void usage(FILE *f) {
  std::fprintf(f,
               "usage: flashattn-bench [options]\n"
               "  --op fwd|bwd|decode|chunked|all\n"
               "                              operations to run (default all: fwd, bwd, decode); chunked: prefill of\n"
               "                              --seq new tokens per sequence (ragged Q) over --seqk keys in all, on a\n"
               "                              paged cache (--page-size, default 16) and on a dense one, timed both\n"
               "  --dtype bf16|fp16|fp32      storage type (default bf16; with --sweep: only this type)\n"
               "  --batch B --heads H --kv-heads HK --seq S --seqk SK --dim D\n"
               "                              shape (defaults 2, 16, H, 1024, S, 128; on HOST 1, 4, H, 256, S, 64);\n"
               "                              decode reads a cache of SK\n"
               "  --dim-v DV                  head dim of V and O (and dO, dV), 0 = --dim (default); fwd, bwd and\n"
               "                              chunked only (MLA prefill: --dim 192 --dim-v 128); rows say D=192/128 and\n"
               "                              count 2*B*H*Sq*Sk*(D+DV) FLOP forward (halved when causal)\n"
               "  --qtokens T                 decode query tokens per sequence, 1..16 (default 1)\n"
               "  --causal                    bottom-right causal mask\n"
               "  --chunks N                  decode KV chunks (0 = automatic)\n"
               "  --page-size P               decode from a paged cache with P rows per page (0 = dense)\n"
               "  --pages-in-order            paged decode: sequence b's pages in pool order (default: a shuffled\n"
               "                              block table); shows what the table's order costs\n"
               "  --layout bhsd|bshd          memory order of Q, K, V, O (default bhsd)\n"
               "  --iters N --warmup N        timed calls (median reported) and untimed calls before them\n"
               "  --sweep prefill|decode|serving|chunked|mla|all\n"
               "                              the kernel-target sweeps: prefill B*S=16k, S 512..16k, causal and not,\n"
               "                              H=2048/D (rounded down) at D 64/128/256 bf16 and fp16, D 96/192 bf16,\n"
               "                              and GQA 32/8 D128 bf16 at S 2k/8k/16k (--dim and --dtype filter it);\n"
               "                              decode GQA 32/8 D128 bf16, 1 query token, (B,L) = (1,8k) (1,64k)\n"
               "                              (1,128k) (8,8k) (8,32k) (32,4k) (64,8k); serving: those shapes dense\n"
               "                              and paged (pages of 1, 16, 64 rows), and 2/4/8/16 query tokens\n"
               "                              (causal) on the dense caches of 256 MiB and more; chunked B4 H32/8\n"
               "                              D128 causal, 512 new tokens over 4k..16k cached keys, paged (page 16;\n"
               "                              pages 1 and 64 over 8k; B1 H128/128 D192 DV128 at pages 16 and 64)\n"
               "                              and dense; mla: DeepSeek-V3's prefill, bf16\n"
               "                              H=128/128 D192 DV128 causal, S 4k/8k/16k, B*S=16k, and its absorbed\n"
               "                              decode, bf16 D576 DV512\n"
               "                              with V read from K's first 512 columns (V's pointer and strides are\n"
               "                              K's), 1 KV head, 1 query token, H 128 and 16 at (B,L) = (1,32k)\n"
               "                              (8,32k) (32,8k) (64,4k) (128,2k), plus 2 tokens (causal) and a paged\n"
               "                              cache (page 64) at B32 L8k H128; its GB/s count the cache once\n"
               "                              (B*L*576*2 bytes), its TFLOP/s 2*B*H*Sq*L*(576+512); on HOST one small\n"
               "                              shape of each kind (all: prefill, decode and serving, not chunked or\n"
               "                              mla; --op fwd|bwd|decode filters; --dim-v filters the prefill and mla\n"
               "                              rows as --dim does)\n"
               "  --json FILE                 write the result rows (rewritten after every shape)\n"
               "  --check-gflop G             host work allowed per correctness check (default 2)\n"
               "  --no-check                  skip the correctness check (rows say \"not checked\")\n"
               "  --deterministic             prefill: also time the deterministic backward (rows bwd-det, same\n"
               "                              FLOPs; checked like bwd, and bitwise equal after the timed calls)\n"
               "  --sinks                     attention sinks (a fixed logit in [-1, 1] per query head) on every\n"
               "                              fwd, bwd, bwd-det and decode call, dSinks from every backward (checked\n"
               "                              against the oracle); rows say \"sinks\": time a run with and one without\n"
               "  --softcap X                 prefill: softcap X (> 0) on every fwd, bwd and bwd-det call (Gemma 2's\n"
               "                              30 and 50); rows say \"softcap\": time a run with and one without\n"
               "  --alibi                     prefill: ALiBi on every fwd, bwd and bwd-det call (slopes\n"
               "                              2^(-8 (h+1) / H)); rows say \"alibi\": time a run with and one without\n"
               "  --list                      print the rows the other options plan, one per line, and run none;\n"
               "                              --backend cuda|host: that backend's plan, listed without a handle (the\n"
               "                              GPU plan on a machine without a GPU)\n"
               "  --backend auto|cuda|host    handle to benchmark (default auto)\n"
               "  --device N                  CUDA device to use\n"
               "Without shape, operation or sweep options a short demo runs (small shapes when no GPU is usable).\n"
               "Checks: CUDA results against the HOST backend (float64 accumulation), HOST results against the\n"
               "bench's own float64 oracle; normwise gates 5e-3 bf16, 6e-4 fp16, 1e-5 fp32, LSE 1e-4.\n"
               "Exit status: 0 all checks passed, 1 a check failed or an operation failed, 2 bad usage,\n"
               "77 --backend cuda without a usable GPU.\n");
}

bool parseDtype(const std::string &s, flashAttnDataType_t *t) {
  if (s == "bf16" || s == "bfloat16")
    *t = FLASHATTN_DATA_BF16;
  else if (s == "fp16" || s == "float16" || s == "half")
    *t = FLASHATTN_DATA_FP16;
  else if (s == "fp32" || s == "float32" || s == "float")
    *t = FLASHATTN_DATA_FP32;
  else
    return false;
  return true;
}

bool parseInt(const char *s, int64_t lo, int64_t *out) {
  char *end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (errno || !end || *end || end == s || v < lo) return false;
  *out = v;
  return true;
}

Options parseOptions(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    auto integer = [&](int64_t lo) {
      const char *v = value();
      int64_t x;
      if (!parseInt(v, lo, &x))
        throw std::invalid_argument(a + " " + v + ": expected an integer >= " + std::to_string(lo));
      return x;
    };
    static const char *const kShapeOptions[] = {"--op",      "--dtype",  "--batch",     "--heads", "--kv-heads",
                                                "--seq",     "--seqk",   "--dim",       "--dim-v", "--qtokens",
                                                "--causal",  "--chunks", "--page-size", "--sweep"};
    for (const char *name : kShapeOptions)
      if (a == name) o.demo = false;
    if (a == "--help" || a == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--op") {
      o.op = value();
      if (o.op != "fwd" && o.op != "bwd" && o.op != "decode" && o.op != "chunked" && o.op != "all")
        throw std::invalid_argument("--op " + o.op + ": expected fwd, bwd, decode, chunked or all");
    } else if (a == "--dtype") {
      const std::string v = value();
      if (!parseDtype(v, &o.dtype)) throw std::invalid_argument("--dtype " + v + ": expected bf16, fp16 or fp32");
      o.dtypeGiven = true;
    } else if (a == "--batch")
      o.batch = integer(1);
    else if (a == "--heads")
      o.heads = integer(1);
    else if (a == "--kv-heads")
      o.kvHeads = integer(1);
    else if (a == "--seq")
      o.seq = integer(1);
    else if (a == "--seqk")
      o.seqK = integer(1);
    else if (a == "--dim")
      o.dim = integer(1);
    else if (a == "--dim-v")
      o.dimV = integer(0);
    else if (a == "--qtokens")
      o.qTokens = integer(1);
    else if (a == "--causal")
      o.causal = true;
    else if (a == "--chunks")
      o.chunks = int32_t(integer(0));
    else if (a == "--page-size")
      o.pageSize = integer(0);
    else if (a == "--iters")
      o.iters = int(integer(1));
    else if (a == "--warmup")
      o.warmup = int(integer(0));
    else if (a == "--json")
      o.json = value();
    else if (a == "--sweep") {
      o.sweep = value();
      if (o.sweep != "prefill" && o.sweep != "decode" && o.sweep != "serving" && o.sweep != "chunked" &&
          o.sweep != "mla" && o.sweep != "all")
        throw std::invalid_argument("--sweep " + o.sweep + ": expected prefill, decode, serving, chunked, mla or all");
    } else if (a == "--layout") {
      const std::string v = value();
      if (v == "bhsd")
        o.layout = Layout::BHSD;
      else if (v == "bshd")
        o.layout = Layout::BSHD;
      else
        throw std::invalid_argument("--layout " + v + ": expected bhsd or bshd");
    } else if (a == "--check-gflop") {
      const char *v = value();
      char *end = nullptr;
      o.checkGflop = std::strtod(v, &end);
      if (!end || *end || !(o.checkGflop > 0))
        throw std::invalid_argument(std::string("--check-gflop ") + v + ": expected a number > 0");
    } else if (a == "--deterministic")
      o.deterministic = true;
    else if (a == "--sinks")
      o.sinks = true;
    else if (a == "--alibi")
      o.alibi = true;
    else if (a == "--softcap") {
      const char *v = value();
      char *end = nullptr;
      o.softcap = std::strtof(v, &end);
      if (!end || *end || !(o.softcap > 0.f) || !std::isfinite(o.softcap))
        throw std::invalid_argument(std::string("--softcap ") + v + ": expected a finite number > 0");
    }
    else if (a == "--pages-in-order")
      o.pagesInOrder = true;
    else if (a == "--no-check")
      o.check = false;
    else if (a == "--list")
      o.list = true;
    else if (a == "--backend") {
      o.backend = value();
      if (o.backend != "auto" && o.backend != "cuda" && o.backend != "host")
        throw std::invalid_argument("--backend " + o.backend + ": expected auto, cuda or host");
    } else if (a == "--device")
      o.device = int(integer(0));
    else
      throw std::invalid_argument("unknown option " + a);
  }
  if (o.heads && o.kvHeads && o.heads % o.kvHeads != 0)
    throw std::invalid_argument("--heads " + std::to_string(o.heads) + " is not a multiple of --kv-heads " +
                                std::to_string(o.kvHeads));
  // The decode path builds one head dim into its cache and checks; a sweep only filters on --dim-v. Without --dim the
  // single shape's head dim depends on the backend, so only an equal --dim makes --dim-v harmless.
  if (o.dimV && o.dimV != o.dim && o.sweep.empty() && (o.op == "decode" || o.op == "all"))
    throw std::invalid_argument("--dim-v " + std::to_string(o.dimV) +
                                " (V/O head dim other than --dim's) is for --op fwd, bwd or chunked only: the " +
                                (o.op == "all" ? "decode rows of --op all" : o.op + " rows") +
                                " take one head dim for Q, K, V and O");
  return o;
}

// ---------------------------------------------------------------------------------------------------------------------
// Shapes

struct PrefillShape {
  flashAttnDataType_t dtype;
  int64_t B, H, HK, Sq, Sk, D;
  bool causal;
  int64_t Dv;  // of V, O, dO, dV
};

struct DecodeShape {
  flashAttnDataType_t dtype;
  int64_t B, H, HK, T, L, D;
  bool causal;
  int32_t chunks;
  int64_t pageSize;
  int64_t Dv = 0;     // of V and O; 0: D
  bool vInK = false;  // V is K's first Dv columns (absorbed MLA): the V descriptor has K's strides and pointer
  int64_t dimV() const { return Dv ? Dv : D; }
};

// Chunked prefill: T new tokens per sequence (a ragged Q) attending to L keys (the cached L - T and their own).
struct ChunkedShape {
  flashAttnDataType_t dtype;
  int64_t B, H, HK, T, L, D;
  bool causal;
  int64_t pageSize;
  int64_t Dv = 0;  // V/O head dim; 0 = D's
  int64_t dimV() const { return Dv ? Dv : D; }
};

// The shape fields of a shape's rows, shared by the run and by --list, so both name a row alike.
Row shapeRow(const char *kind, const char *op, flashAttnDataType_t dtype, int64_t B, int64_t H, int64_t HK,
             int64_t Sq, int64_t Sk, int64_t D, int64_t Dv, bool causal, bool sinks) {
  Row r;
  r.kind = kind;
  r.op = op;
  r.dtype = dtype;
  r.B = B;
  r.H = H;
  r.HK = HK;
  r.Sq = Sq;
  r.Sk = Sk;
  r.D = D;
  r.Dv = Dv;
  r.causal = causal;
  r.sinks = sinks;
  return r;
}

Row prefillRow(const PrefillShape &s, const char *op, bool sinks, float softcap, bool alibi) {
  Row r = shapeRow("prefill", op, s.dtype, s.B, s.H, s.HK, s.Sq, s.Sk, s.D, s.Dv, s.causal, sinks);
  r.softcap = softcap;
  r.alibi = alibi;
  return r;
}

Row decodeRow(const DecodeShape &s, bool sinks, bool pagesInOrder) {
  Row r = shapeRow("decode", "decode", s.dtype, s.B, s.H, s.HK, s.T, s.L, s.D, s.dimV(), s.causal, sinks);
  r.chunks = s.chunks;
  r.pageSize = s.pageSize;
  r.pagesInOrder = pagesInOrder && s.pageSize > 0;
  r.vInK = s.vInK;
  return r;
}

// A chunked shape's paged-cache row, or its dense-cache row: report.py pairs them by page size 0.
Row chunkedRow(const ChunkedShape &s, bool paged) {
  Row r = shapeRow("chunked", "fwd", s.dtype, s.B, s.H, s.HK, s.T, s.L, s.D, s.dimV(), s.causal, false);
  r.pageSize = paged ? s.pageSize : 0;
  return r;
}

// Key-query pairs that do work: the papers count half of the square for causal Sq == Sk, so figures compare with
// theirs; otherwise the exact number of visible pairs under the bottom-right mask.
double visiblePairs(int64_t sq, int64_t sk, bool causal) {
  if (!causal) return double(sq) * double(sk);
  if (sq == sk) return double(sq) * double(sk) / 2;
  double pairs = 0;
  for (int64_t i = 0; i < sq; ++i) pairs += double(std::clamp<int64_t>(i + sk - sq + 1, 0, sk));
  return pairs;
}

// ---------------------------------------------------------------------------------------------------------------------
// The benchmark

class Bench {
 public:
  Bench(Options o, flashAttnHandle_t handle, flashAttnHandle_t host, bool cuda)
      : opt_(std::move(o)), handle_(handle), host_(host), mem_(cuda) {
    if (opt_.iters < 0) opt_.iters = cuda ? 30 : 3;
    if (opt_.warmup < 0) opt_.warmup = cuda ? 5 : 1;
#if defined(FLASHATTN_BENCH_CUDA)
    if (cuda) apiCheck(flashAttnSetStream(handle_, mem_.stream()), "flashAttnSetStream");
#endif
  }
  ~Bench() {
#if defined(FLASHATTN_BENCH_CUDA)
    if (mem_.cuda()) flashAttnSetStream(handle_, nullptr);  // the stream dies with mem_
#endif
  }

  void setPlanned(size_t n) { planned_ = n; }
  void setMeta(std::string deviceName, std::string backendName) {
    deviceName_ = std::move(deviceName);
    backendName_ = std::move(backendName);
  }
  int failures() const { return failures_; }
  const std::vector<Row> &rows() const { return rows_; }

  // After a kernel fault every later CUDA call fails: the run stops instead of filling the table with that error.
  std::string deviceLost() {
#if defined(FLASHATTN_BENCH_CUDA)
    if (mem_.cuda()) {
      const cudaError_t err = cudaDeviceSynchronize();
      if (err != cudaSuccess && cudaDeviceSynchronize() != cudaSuccess) return cudaGetErrorString(err);
    }
#endif
    return "";
  }
  void prefill(const PrefillShape &s, bool doFwd, bool doBwd);
  void decode(const DecodeShape &s);
  void chunked(const ChunkedShape &s);
  void printTable() const;

 private:
  double budgetFlops() const { return opt_.checkGflop * 1e9; }
  // The HOST backend is the reference of CUDA results; its own results are checked against the float64 oracle.
  bool useOracle() const { return !mem_.cuda(); }
  const char *referenceName() const { return useOracle() ? "float64 oracle" : "HOST backend"; }
  void record(Row row);
  std::vector<double> timeCalls(const std::function<flashAttnStatus_t(int64_t)> &call, int64_t firstIndex,
                                const char *what);
  std::string support(flashAttnOperation_t op, flashAttnAttentionDescriptor_t attn, flashAttnSeqDescriptor_t seq,
                      flashAttnTensorDescriptor_t q, flashAttnTensorDescriptor_t k, flashAttnTensorDescriptor_t v,
                      flashAttnTensorDescriptor_t o);
  void writeJson() const;

  Options opt_;
  flashAttnHandle_t handle_, host_;
  Memory mem_;
  double backToBackMs_ = NAN;  // of the last timeCalls on CUDA
  double hostUs_ = NAN;        // of the last timeCalls on CUDA
  // The last timeCalls' figures beside the median event time.
  void takeCallStats(Row &row) const {
    row.backToBackMs = backToBackMs_;
    row.hostUs = hostUs_;
  }
  std::vector<Row> rows_;
  int failures_ = 0;
  size_t planned_ = 0;
  std::string deviceName_, backendName_;
};

// peers.py's median: the upper middle of an even count (the mean of the two middles would lean every ratio our way).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each timed call gets its own pair of events and starts on an idle stream, exactly as peers.py times its peers, so
// the ratios compare like with like (launch latency and host overhead count on both sides).
// `call(i)` gets a running index so decode can rotate among input copies.
std::vector<double> Bench::timeCalls(const std::function<flashAttnStatus_t(int64_t)> &call, int64_t firstIndex,
                                     const char *what) {
  int64_t index = firstIndex;
  for (int i = 0; i < opt_.warmup; ++i) apiCheck(call(index++), what);
  std::vector<double> ms(size_t(opt_.iters));
#if defined(FLASHATTN_BENCH_CUDA)
  if (mem_.cuda()) {
    std::vector<cudaEvent_t> start(ms.size()), stop(ms.size());
    for (size_t i = 0; i < ms.size(); ++i) {
      cudaCheck(cudaEventCreate(&start[i]), "cudaEventCreate");
      cudaCheck(cudaEventCreate(&stop[i]), "cudaEventCreate");
    }
    cudaStream_t stream = mem_.stream();
    cudaError_t err = cudaStreamSynchronize(stream);
    std::vector<double> hostUs(ms.size());
    for (size_t i = 0; i < ms.size() && err == cudaSuccess; ++i) {
      cudaEventRecord(start[i], stream);
      try {
        const auto t0 = std::chrono::steady_clock::now();
        apiCheck(call(index++), what);
        hostUs[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      } catch (const std::exception &) {
        for (size_t j = 0; j < ms.size(); ++j) {
          cudaEventDestroy(start[j]);
          cudaEventDestroy(stop[j]);
        }
        throw;
      }
      cudaEventRecord(stop[i], stream);
      err = cudaEventSynchronize(stop[i]);
    }
    for (size_t i = 0; i < ms.size() && err == cudaSuccess; ++i) {
      float t = 0;
      err = cudaEventElapsedTime(&t, start[i], stop[i]);
      ms[i] = t;
    }
    // The host's share of a call: validation, planning, the launches (the calls return once queued).
    hostUs_ = err == cudaSuccess ? median(hostUs) : NAN;
    // Also the calls queued back to back: the GPU time alone, with the launch latency hidden behind the queue.
    backToBackMs_ = NAN;
    if (err == cudaSuccess) {
      bool allQueued = true;
      cudaEventRecord(start[0], stream);
      for (size_t i = 0; i < ms.size() && allQueued; ++i) allQueued = call(index++) == FLASHATTN_STATUS_SUCCESS;
      cudaEventRecord(stop[0], stream);
      err = cudaEventSynchronize(stop[0]);
      float t = 0;
      if (err == cudaSuccess) err = cudaEventElapsedTime(&t, start[0], stop[0]);
      if (allQueued) backToBackMs_ = t / double(ms.size());
    }
    for (size_t i = 0; i < ms.size(); ++i) {
      cudaEventDestroy(start[i]);
      cudaEventDestroy(stop[i]);
    }
    cudaCheck(err, what);
    return ms;
  }
#endif
  for (auto &t : ms) {
    const auto t0 = std::chrono::steady_clock::now();
    apiCheck(call(index++), what);
    t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return ms;
}

std::string Bench::support(flashAttnOperation_t op, flashAttnAttentionDescriptor_t attn, flashAttnSeqDescriptor_t seq,
                           flashAttnTensorDescriptor_t q, flashAttnTensorDescriptor_t k, flashAttnTensorDescriptor_t v,
                           flashAttnTensorDescriptor_t o) {
  char text[512] = {};
  int32_t deterministic = 0;
  apiCheck(flashAttnCheckSupport(handle_, op, attn, seq, q, k, v, o, text, sizeof text, &deterministic),
           "flashAttnCheckSupport");
  return text;
}

void Bench::record(Row row) {
  const bool failed = (!row.error.empty() && !row.notSupported) || (row.checked && !row.pass);
  if (failed) ++failures_;
  rows_.push_back(std::move(row));
  const Row &r = rows_.back();
  std::fprintf(stderr, "[%zu/%zu] %-48s %s", rows_.size(), std::max(planned_, rows_.size()), shapeText(r).c_str(),
               resultText(r).c_str());
  if (std::isfinite(r.backToBackMs)) std::fprintf(stderr, " [back to back %.4f ms]", r.backToBackMs);
  if (r.checked) std::fprintf(stderr, " (host check %.1f s: %s)", r.checkSeconds, r.checkScope.c_str());
  std::fprintf(stderr, "\n");
  writeJson();
}

void Bench::writeJson() const {
  if (opt_.json.empty()) return;
  const std::string tmp = opt_.json + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s: %s\n", tmp.c_str(), std::strerror(errno));
    return;
  }
  const char *commit = std::getenv("FLASHATTN_BENCH_COMMIT");
  char date[32] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  int32_t version = flashAttnGetVersion();
  std::fprintf(f,
               "[\n {\"kind\": \"meta\", \"backend\": %s, \"device\": %s, \"version\": \"%d.%d.%d\", "
               "\"commit\": %s, \"date\": \"%s\", \"iters\": %d, \"warmup\": %d}",
               jsonString(backendName_).c_str(), jsonString(deviceName_).c_str(), version / 10000, version / 100 % 100,
               version % 100, jsonString(commit ? commit : "").c_str(), date, opt_.iters, opt_.warmup);
  for (const Row &r : rows_) std::fprintf(f, ",\n %s", rowJson(r).c_str());
  std::fprintf(f, "\n]\n");
  const bool ok = std::fclose(f) == 0;
  if (!ok || std::rename(tmp.c_str(), opt_.json.c_str()) != 0)
    std::fprintf(stderr, "cannot write %s: %s\n", opt_.json.c_str(), std::strerror(errno));
}

void Bench::printTable() const {
  int width = 50;
  for (const Row &r : rows_) width = std::max(width, int(shapeText(r).size()));
  std::printf("\n%-*s %s\n", width, "shape", "result");
  for (const Row &r : rows_) std::printf("%-*s %s\n", width, shapeText(r).c_str(), resultText(r).c_str());
  int unsupported = 0, unchecked = 0;
  for (const Row &r : rows_) {
    unsupported += r.notSupported;
    unchecked += r.error.empty() && !r.checked;
  }
  std::printf("\n%zu rows: %d failed, %d not supported, %d not checked\n", rows_.size(), failures_, unsupported,
              unchecked);
}

// Which heads a check looks at. The pair {0, last} keeps query head h reading KV head h / group in the slice too
// (the last query head reads the last KV head), so one strided descriptor covers both.
struct HeadPick {
  Pick q, kv;
};
HeadPick pairOfHeads(int64_t H, int64_t HK) {
  HeadPick p;
  p.q = H == 1 ? allOf(1) : Pick{0, 2, H - 1};
  p.kv = HK == 1 ? allOf(1) : Pick{0, 2, HK - 1};
  return p;
}
// dK/dV of a KV head sum over its whole query group, so a check of them needs the group: the last KV head and its
// queries, or the pair of heads when every KV head has one query head.
HeadPick lastGroup(int64_t H, int64_t HK) {
  const int64_t g = H / HK;
  if (g == 1) return pairOfHeads(H, HK);
  return HeadPick{Pick{H - g, g, 1}, Pick{HK - 1, 1, 1}};
}

// The heads and the number of rows (or keys) of one slice check costing `perItem` host FLOP per head and row: every
// head when that leaves at least 16 rows (the HOST backend spreads heads over its threads), else the `few` heads.
struct SliceChoice {
  HeadPick heads;
  int64_t count;
};
SliceChoice chooseSlice(int64_t H, int64_t HK, const HeadPick &few, int64_t n, double perItem, double budget) {
  const int64_t wantAll = int64_t(budget / (double(H) * perItem));
  if (wantAll >= std::min<int64_t>(n, 16)) return SliceChoice{HeadPick{allOf(H), allOf(HK)}, wantAll};
  return SliceChoice{few, std::max<int64_t>(16, int64_t(budget / (double(few.q.count) * perItem)))};
}

// "all heads", "head 5", "heads 3..5", "2 heads step 5".
std::string pickText(const char *one, const char *many, const Pick &p, int64_t n) {
  if (p.count == n) return std::string("all ") + many;
  char buf[96];
  if (p.count == 1)
    std::snprintf(buf, sizeof buf, "%s %lld", one, (long long)p.start);
  else if (p.step == 1)
    std::snprintf(buf, sizeof buf, "%s %lld..%lld", many, (long long)p.start, (long long)(p.start + p.count - 1));
  else
    std::snprintf(buf, sizeof buf, "%lld %s step %lld", (long long)p.count, many, (long long)p.step);
  return buf;
}

// ---------------------------------------------------------------------------------------------------------------------
// Prefill: forward and backward

void Bench::prefill(const PrefillShape &s, bool doFwd, bool doBwd) {
  Row fwd = prefillRow(s, "fwd", opt_.sinks, opt_.softcap, opt_.alibi),
      bwd = prefillRow(s, "bwd", opt_.sinks, opt_.softcap, opt_.alibi);
  const size_t es = elementBytes(s.dtype);
  // Q K^T costs D per visible pair and P V costs Dv: 4*B*H*pairs*D when the two head dims agree.
  const double fwdFlops =
      2.0 * double(s.B) * double(s.H) * visiblePairs(s.Sq, s.Sk, s.causal) * double(s.D + s.Dv);

  const View qv = tensor4(opt_.layout, s.B, s.H, s.Sq, s.D);
  const View kv = tensor4(opt_.layout, s.B, s.HK, s.Sk, s.D);
  // V (and dV) and O (and dO) have the V head dim; the same picks slice them as K and Q.
  const View vv = tensor4(opt_.layout, s.B, s.HK, s.Sk, s.Dv);
  const View ov = tensor4(opt_.layout, s.B, s.H, s.Sq, s.Dv);
  const View lv = View::dense({s.B, s.H, s.Sq});
  auto bytesOf = [&](const View &v) { return size_t(v.extent()) * es; };

  // Filled by the forward stage, read by the backward stage. The backward's descriptor also says where dSinks go.
  std::unique_ptr<AttnDesc> attn, bwdAttn;
  std::unique_ptr<TensorDesc> qD, kD, vD, oD, lD;
  HostBlock hq, hk, hv, ho, hl;
  std::unique_ptr<Buffer> dq, dk, dv, dout, dlse;
  // --sinks: the logits on the host (the oracle and the HOST reference read them) and in the handle's memory, and
  // where the backwards write dSinks. Null pointers without --sinks.
  const std::vector<float> sinks = opt_.sinks ? sinkLogits(s.H) : std::vector<float>();
  std::unique_ptr<Buffer> dsinks, ddsinks;
  const float *sinksPtr = nullptr;
  float *dSinksPtr = nullptr;
  // --alibi: the slopes on the host and in the handle's memory. With them a check slices contiguous tails of the rows
  // and keys: the distance to the bottom-right diagonal is then the full problem's (spread picks would move it).
  const std::vector<float> slopes = opt_.alibi ? alibiSlopes(s.H) : std::vector<float>();
  std::unique_ptr<Buffer> dslopes;
  const float *slopesPtr = nullptr;
  const bool tails = s.causal || opt_.alibi;

  auto fail = [&](Row &row, const std::exception &e) {
    row.error = e.what();
    if (auto *api = dynamic_cast<const ApiError *>(&e))
      row.notSupported = api->status == FLASHATTN_STATUS_NOT_SUPPORTED;
  };

  bool forwardOk = false;
  try {
    if (opt_.sinks) {
      dsinks = uploadFloats(mem_, sinks);
      ddsinks = std::make_unique<Buffer>(mem_, dsinks->bytes());
      sinksPtr = static_cast<const float *>(dsinks->get());
      dSinksPtr = static_cast<float *>(ddsinks->get());
    }
    if (opt_.alibi) {
      dslopes = uploadFloats(mem_, slopes);
      slopesPtr = static_cast<const float *>(dslopes->get());
    }
    attn = std::make_unique<AttnDesc>(s.causal, false, sinksPtr, nullptr, opt_.softcap, slopesPtr);
    bwdAttn = std::make_unique<AttnDesc>(s.causal, false, sinksPtr, dSinksPtr, opt_.softcap, slopesPtr);
    qD = std::make_unique<TensorDesc>(s.dtype, qv);
    kD = std::make_unique<TensorDesc>(s.dtype, kv);
    vD = std::make_unique<TensorDesc>(s.dtype, vv);
    oD = std::make_unique<TensorDesc>(s.dtype, ov);
    lD = std::make_unique<TensorDesc>(FLASHATTN_DATA_FP32, lv);
    fwd.kernel = support(FLASHATTN_OP_FORWARD, *attn, nullptr, *qD, *kD, *vD, *oD);

    hq = randomTensor(s.dtype, qv.extent(), 1);
    hk = randomTensor(s.dtype, kv.extent(), 2);
    hv = randomTensor(s.dtype, vv.extent(), 3);
    dq = std::make_unique<Buffer>(mem_, bytesOf(qv));
    dk = std::make_unique<Buffer>(mem_, bytesOf(kv));
    dv = std::make_unique<Buffer>(mem_, bytesOf(vv));
    dout = std::make_unique<Buffer>(mem_, bytesOf(ov));
    dlse = std::make_unique<Buffer>(mem_, bytesOf(lv) / es * 4);
    dq->upload(hq);
    dk->upload(hk);
    dv->upload(hv);

    size_t wsBytes = 0;
    apiCheck(flashAttnForwardGetWorkspaceSize(handle_, *attn, nullptr, *qD, *kD, *vD, *oD, *lD, &wsBytes),
             "flashAttnForwardGetWorkspaceSize");
    Buffer ws(mem_, wsBytes);
    auto run = [&](int64_t) {
      return flashAttnForward(handle_, *attn, nullptr, *qD, dq->get(), *kD, dk->get(), *vD, dv->get(), *oD, dout->get(),
                              *lD, static_cast<float *>(dlse->get()), ws.get(), wsBytes);
    };
    dout->poison();
    dlse->poison();
    apiCheck(run(0), "flashAttnForward");
    mem_.synchronize();
    ho = dout->download();
    hl = dlse->download();
    forwardOk = true;

    if (doFwd) {
      if (opt_.check) {
        const auto t0 = std::chrono::steady_clock::now();
        HeadPick heads = HeadPick{allOf(s.H), allOf(s.HK)};
        Pick batch = allOf(s.B), rows = allOf(s.Sq);
        const double full = fwdFlops * (s.causal ? 2.0 : 1.0);
        if (full > budgetFlops()) {
          batch = Pick{s.B - 1, 1, 1};
          const SliceChoice c =
              chooseSlice(s.H, s.HK, pairOfHeads(s.H, s.HK), s.Sq, double(s.Sk) * (s.D + s.Dv) * 2, budgetFlops());
          heads = c.heads;
          rows = tails ? tail(s.Sq, c.count) : spread(s.Sq, c.count);
        }
        const View q1 = qv.pick(0, batch).pick(1, heads.q).pick(2, rows);
        const View k1 = kv.pick(0, batch).pick(1, heads.kv);
        const View v1 = vv.pick(0, batch).pick(1, heads.kv);
        const View o1 = ov.pick(0, batch).pick(1, heads.q).pick(2, rows);
        const View l1 = lv.pick(0, batch).pick(1, heads.q).pick(2, rows);
        const View oRef = o1.compact(), lRef = l1.compact();
        HostBlock refO(size_t(oRef.elements()) * es), refL(size_t(lRef.elements()) * 4);
        if (useOracle()) {
          bench_oracle::Shape os;
          os.B = batch.count, os.H = heads.q.count, os.HK = heads.kv.count, os.Sq = rows.count, os.Sk = s.Sk;
          os.D = s.D, os.Dv = s.Dv, os.causal = s.causal, os.softcap = opt_.softcap;
          for (float x : pickPerHead(sinks, heads.q)) os.sinks.push_back(x);
          for (float x : pickPerHead(slopes, heads.q)) os.alibi.push_back(x);
          std::vector<double> o, l;
          bench_oracle::forward(os, gather(hq.data(), q1, s.dtype), gather(hk.data(), k1, s.dtype),
                                gather(hv.data(), v1, s.dtype), o, l);
          storeRounded(o, refO.data(), s.dtype);
          storeFloats(l, refL.data());
        } else {
          TensorDesc q1D(s.dtype, q1), k1D(s.dtype, k1), v1D(s.dtype, v1), o1D(s.dtype, oRef),
              l1D(FLASHATTN_DATA_FP32, lRef);
          // The HOST handle reads host memory, and only the sliced heads' sinks.
          const std::vector<float> sinks1 = pickPerHead(sinks, heads.q), slopes1 = pickPerHead(slopes, heads.q);
          const AttnDesc hostAttn(s.causal, false, opt_.sinks ? sinks1.data() : nullptr, nullptr, opt_.softcap,
                                  opt_.alibi ? slopes1.data() : nullptr);
          size_t hostWs = 0;
          apiCheck(flashAttnForwardGetWorkspaceSize(host_, hostAttn, nullptr, q1D, k1D, v1D, o1D, l1D, &hostWs),
                   "HOST flashAttnForwardGetWorkspaceSize");
          HostBlock hws(hostWs);
          apiCheck(flashAttnForward(host_, hostAttn, nullptr, q1D, hq.data() + q1.offset * es, k1D,
                                    hk.data() + k1.offset * es, v1D, hv.data() + v1.offset * es, o1D, refO.data(), l1D,
                                    reinterpret_cast<float *>(refL.data()), hostWs ? hws.data() : nullptr, hostWs),
                   "HOST flashAttnForward");
        }
        const ErrorStats e = compare(ho.data(), o1, refO.data(), oRef, s.dtype);
        const LseStats le = compareLse(reinterpret_cast<const float *>(hl.data()), l1,
                                       reinterpret_cast<const float *>(refL.data()), lRef);
        fwd.checked = true;
        fwd.reference = referenceName();
        fwd.maxErr = e.nonFinite ? INFINITY : e.maxAbs;
        fwd.normwise = e.normwise();
        fwd.lseErr = le.mismatched ? INFINITY : le.maxAbs;
        fwd.pass = fwd.normwise <= normwiseGate(s.dtype) && fwd.lseErr <= kLseGate;
        fwd.checkScope = pickText("batch", "batches", batch, s.B) + ", " + pickText("head", "heads", heads.q, s.H) +
                         ", " + pickText("row", "rows", rows, s.Sq);
        if (e.nonFinite) fwd.checkScope += ", " + std::to_string(e.nonFinite) + " non-finite outputs";
        fwd.checkSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      fwd.ms = median(timeCalls(run, 1, "flashAttnForward"));
      takeCallStats(fwd);
      fwd.tflops = fwdFlops / (fwd.ms * 1e-3) / 1e12;
      if (fwd.checked) checkRepeatable(fwd, ho, hl, *dout, *dlse);
    }
  } catch (const std::exception &e) {
    fail(fwd, e);
  }
  if (doFwd) record(fwd);
  if (!doBwd) return;
  if (!forwardOk) {
    bwd.error = "forward failed: " + fwd.error;
    bwd.notSupported = fwd.notSupported;
    record(bwd);
    if (opt_.deterministic) {
      bwd.op = "bwd-det";
      record(bwd);
    }
    return;
  }

  // One backward row: the attention descriptor says whether it is the deterministic one.
  auto backward = [&](Row &row, const AttnDesc &ad) {
    try {
      row.kernel = support(FLASHATTN_OP_BACKWARD, ad, nullptr, *qD, *kD, *vD, *oD);
      HostBlock hdo = randomTensor(s.dtype, ov.extent(), 4);
      Buffer ddo(mem_, bytesOf(ov)), ddq(mem_, bytesOf(qv)), ddk(mem_, bytesOf(kv)), ddv(mem_, bytesOf(vv));
      ddo.upload(hdo);
      TensorDesc dOD(s.dtype, ov), dQD(s.dtype, qv), dKD(s.dtype, kv), dVD(s.dtype, vv);
      size_t wsBytes = 0;
      apiCheck(flashAttnBackwardGetWorkspaceSize(handle_, ad, nullptr, *qD, *kD, *vD, *oD, *lD, &wsBytes),
               "flashAttnBackwardGetWorkspaceSize");
      Buffer ws(mem_, wsBytes);
      auto run = [&](int64_t) {
        return flashAttnBackward(handle_, ad, nullptr, *qD, dq->get(), *kD, dk->get(), *vD, dv->get(), *oD, dout->get(),
                                 dOD, ddo.get(), *lD, static_cast<const float *>(dlse->get()), dQD, ddq.get(), dKD,
                                 ddk.get(), dVD, ddv.get(), ws.get(), wsBytes);
      };
      ddq.poison();
      ddk.poison();
      ddv.poison();
      if (ddsinks) ddsinks->poison();
      apiCheck(run(0), "flashAttnBackward");
      mem_.synchronize();

      if (opt_.check) {
        const auto t0 = std::chrono::steady_clock::now();
        const HostBlock gq = ddq.download(), gk = ddk.download(), gv = ddv.download();
        // The O and LSE the device backward read (the timed forwards rewrote them).
        ho = dout->download();
        hl = dlse->download();
        ErrorStats eq, ek, ev;
        std::vector<std::string> scope;
        // One HOST backward over a slice: Q rows `rows` against keys `keys`. P is recomputed from the saved LSE, so
        // a slice of keys gives exact dK/dV for those keys and a slice of rows exact dQ for those rows.
        auto hostBackward = [&](const Pick &batch, const HeadPick &heads, const Pick &rows, const Pick &keys,
                                bool wantDq, bool wantDkv) {
          const View q1 = qv.pick(0, batch).pick(1, heads.q).pick(2, rows);
          const View k1 = kv.pick(0, batch).pick(1, heads.kv).pick(2, keys);
          const View v1 = vv.pick(0, batch).pick(1, heads.kv).pick(2, keys);
          const View o1 = ov.pick(0, batch).pick(1, heads.q).pick(2, rows);
          const View l1 = lv.pick(0, batch).pick(1, heads.q).pick(2, rows);
          const View qRef = q1.compact(), kRef = k1.compact(), vRef = v1.compact(), lRef = l1.compact();
          HostBlock lse1 = gatherFloats(reinterpret_cast<const float *>(hl.data()), l1);
          HostBlock rq(size_t(qRef.elements()) * es), rk(size_t(kRef.elements()) * es),
              rv(size_t(vRef.elements()) * es);
          if (useOracle()) {
            bench_oracle::Shape os;
            os.B = batch.count, os.H = heads.q.count, os.HK = heads.kv.count, os.Sq = rows.count, os.Sk = keys.count;
            os.D = s.D, os.Dv = s.Dv, os.causal = s.causal, os.softcap = opt_.softcap;
            for (float x : pickPerHead(slopes, heads.q)) os.alibi.push_back(x);
            std::vector<double> lse(size_t(lRef.elements()));
            for (size_t i = 0; i < lse.size(); ++i) lse[i] = reinterpret_cast<const float *>(lse1.data())[i];
            std::vector<double> gq, gk, gv;
            bench_oracle::backward(os, gather(hq.data(), q1, s.dtype), gather(hk.data(), k1, s.dtype),
                                   gather(hv.data(), v1, s.dtype), gather(ho.data(), o1, s.dtype),
                                   gather(hdo.data(), o1, s.dtype), lse, gq, gk, gv);
            storeRounded(gq, rq.data(), s.dtype);
            storeRounded(gk, rk.data(), s.dtype);
            storeRounded(gv, rv.data(), s.dtype);
          } else {
            TensorDesc q1D(s.dtype, q1), k1D(s.dtype, k1), v1D(s.dtype, v1), o1D(s.dtype, o1),
                l1D(FLASHATTN_DATA_FP32, lRef), qRD(s.dtype, qRef), kRD(s.dtype, kRef), vRD(s.dtype, vRef);
            // With sinks or ALiBi the HOST handle needs their host copies, the sliced heads' only (dSinks is checked
            // below).
            const std::vector<float> sinks1 = pickPerHead(sinks, heads.q), slopes1 = pickPerHead(slopes, heads.q);
            std::unique_ptr<AttnDesc> hostOwnAd;
            if (opt_.sinks || opt_.alibi)
              hostOwnAd = std::make_unique<AttnDesc>(s.causal, false, opt_.sinks ? sinks1.data() : nullptr, nullptr,
                                                     opt_.softcap, opt_.alibi ? slopes1.data() : nullptr);
            const AttnDesc &hostAd = hostOwnAd ? *hostOwnAd : ad;
            size_t hostWs = 0;
            apiCheck(flashAttnBackwardGetWorkspaceSize(host_, hostAd, nullptr, q1D, k1D, v1D, o1D, l1D, &hostWs),
                     "HOST flashAttnBackwardGetWorkspaceSize");
            HostBlock hws(hostWs);
            const size_t qo = size_t(q1.offset) * es, ko = size_t(k1.offset) * es, vo = size_t(v1.offset) * es,
                         oo = size_t(o1.offset) * es;
            apiCheck(flashAttnBackward(host_, hostAd, nullptr, q1D, hq.data() + qo, k1D, hk.data() + ko, v1D,
                                       hv.data() + vo, o1D, ho.data() + oo, o1D, hdo.data() + oo, l1D,
                                       reinterpret_cast<const float *>(lse1.data()), qRD, rq.data(), kRD, rk.data(),
                                       vRD, rv.data(), hostWs ? hws.data() : nullptr, hostWs),
                     "HOST flashAttnBackward");
          }
          if (wantDq) eq = compare(gq.data(), q1, rq.data(), qRef, s.dtype);
          if (wantDkv) {
            ek = compare(gk.data(), k1, rk.data(), kRef, s.dtype);
            ev = compare(gv.data(), v1, rv.data(), vRef, s.dtype);
          }
          scope.push_back(std::string(wantDq && wantDkv ? "dQ dK dV"
                                      : wantDq          ? "dQ"
                                                        : "dK dV") +
                          " on " + pickText("batch", "batches", batch, s.B) + ", " +
                          pickText("head", "heads", heads.q, s.H) + ", " + pickText("row", "rows", rows, s.Sq) + ", " +
                          pickText("key", "keys", keys, s.Sk));
        };
        // Recompute S (D) and dP (Dv), then dQ and dK (D each) and dV (Dv): 10*D when the head dims agree.
        const double perPair = 2.0 * double(3 * s.D + 2 * s.Dv);
        if (double(s.B) * s.H * s.Sq * s.Sk * perPair <= budgetFlops()) {
          hostBackward(allOf(s.B), HeadPick{allOf(s.H), allOf(s.HK)}, allOf(s.Sq), allOf(s.Sk), true, true);
        } else {
          const Pick batch{s.B - 1, 1, 1};
          const SliceChoice r =
              chooseSlice(s.H, s.HK, pairOfHeads(s.H, s.HK), s.Sq, double(s.Sk) * perPair, budgetFlops());
          const SliceChoice k =
              chooseSlice(s.H, s.HK, lastGroup(s.H, s.HK), s.Sk, double(s.Sq) * perPair, budgetFlops());
          hostBackward(batch, r.heads, tails ? tail(s.Sq, r.count) : spread(s.Sq, r.count), allOf(s.Sk), true,
                       false);
          hostBackward(batch, k.heads, allOf(s.Sq), tails ? tail(s.Sk, k.count) : spread(s.Sk, k.count), false,
                       true);
        }
        // dSinks sums over every batch and row, so a slice cannot check it; the full sum costs only a pass over O
        // and dO, done one (batch, head) at a time so no full-size double copy is made. The reference is the
        // oracle's formula on the O and LSE the backward read (on CUDA too: it needs no attention of its own).
        ErrorStats es2;
        if (opt_.sinks) {
          const HostBlock gs = ddsinks->download();
          std::vector<double> ref(size_t(s.H), 0.0);
          for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < s.H; ++h) {
              const Pick one{h, 1, 1};
              const View o1 = ov.pick(0, Pick{b, 1, 1}).pick(1, one);
              const View l1 = lv.pick(0, Pick{b, 1, 1}).pick(1, one);
              bench_oracle::Shape os;
              os.B = 1, os.H = 1, os.HK = 1, os.Sq = s.Sq, os.Sk = s.Sk, os.D = s.D, os.Dv = s.Dv;
              os.causal = s.causal;
              os.sinks = {double(sinks[size_t(h)])};
              std::vector<double> lse(size_t(s.Sq)), part;
              l1.forEach([&](int64_t off, int64_t lin) {
                lse[size_t(lin)] = reinterpret_cast<const float *>(hl.data())[off];
              });
              bench_oracle::sinksGradient(os, gather(ho.data(), o1, s.dtype), gather(hdo.data(), o1, s.dtype), lse,
                                          part);
              ref[size_t(h)] += part[0];
            }
          HostBlock refS(ref.size() * 4);
          storeFloats(ref, refS.data());
          const View sv = View::dense({s.H});
          es2 = compare(gs.data(), sv, refS.data(), sv, FLASHATTN_DATA_FP32);
          scope.push_back("dSinks on all batches, heads and rows, against the float64 oracle");
        }
        row.checked = true;
        row.reference = referenceName();
        row.maxErr = std::max({eq.maxAbs, ek.maxAbs, ev.maxAbs, es2.maxAbs});
        row.normwise = std::max({eq.normwise(), ek.normwise(), ev.normwise(), es2.normwise()});
        const int64_t nonFinite = eq.nonFinite + ek.nonFinite + ev.nonFinite + es2.nonFinite;
        if (nonFinite) row.maxErr = INFINITY;
        row.pass = row.normwise <= normwiseGate(s.dtype);
        char worst[192];
        std::snprintf(worst, sizeof worst, "normwise dQ %.2e dK %.2e dV %.2e", eq.normwise(), ek.normwise(),
                      ev.normwise());
        row.checkScope = worst;
        if (opt_.sinks) {
          std::snprintf(worst, sizeof worst, " dSinks %.2e", es2.normwise());
          row.checkScope += worst;
        }
        for (const auto &part : scope) row.checkScope += "; " + part;
        if (nonFinite) row.checkScope += "; " + std::to_string(nonFinite) + " non-finite gradients";
        row.checkSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      // Deterministic mode promises bitwise equal gradients run to run: the first call's bytes are kept to compare with
      // what the last call of timeCalls (its back-to-back calls included) leaves.
      HostBlock firstQ, firstK, firstV, firstS;
      if (row.op == "bwd-det") {
        firstQ = ddq.download();
        firstK = ddk.download();
        firstV = ddv.download();
        if (ddsinks) firstS = ddsinks->download();
      }
      row.ms = median(timeCalls(run, 1, "flashAttnBackward"));
      takeCallStats(row);
      row.tflops = 2.5 * fwdFlops / (row.ms * 1e-3) / 1e12;
      if (row.op == "bwd-det") {
        row.deterministic = sameBytes(firstQ, ddq.download()) && sameBytes(firstK, ddk.download()) &&
                            sameBytes(firstV, ddv.download()) && (!ddsinks || sameBytes(firstS, ddsinks->download()));
        if (!row.deterministic) {
          row.pass = false;
          row.checkScope += "; the gradients of the last call differ bitwise from the first call's";
        }
      }
    } catch (const std::exception &e) {
      fail(row, e);
    }
    record(row);
  };
  backward(bwd, *bwdAttn);
  if (!opt_.deterministic) return;
  Row det = prefillRow(s, "bwd-det", opt_.sinks, opt_.softcap, opt_.alibi);
  std::unique_ptr<AttnDesc> detAttn;
  try {
    detAttn = std::make_unique<AttnDesc>(s.causal, true, sinksPtr, dSinksPtr, opt_.softcap, slopesPtr);
  } catch (const std::exception &e) {
    fail(det, e);
    record(det);
    return;
  }
  backward(det, *detAttn);
}

// ---------------------------------------------------------------------------------------------------------------------
// Decode

// A KV cache that fits in the L2 (50-60 MB on H100/H200) would measure the L2: the timed calls rotate among enough
// copies of the inputs that the set read exceeds this.
constexpr double kRotationBytes = 512.0 * 1024 * 1024;

void Bench::decode(const DecodeShape &s) {
  Row row = decodeRow(s, opt_.sinks, opt_.pagesInOrder);
  const size_t es = elementBytes(s.dtype);
  const bool paged = s.pageSize > 0;
  const int64_t Dv = s.dimV();
  // V inside K (absorbed MLA) is read with K: the cache's bytes count once.
  const double kvBytes =
      double(s.B) * double(s.HK) * double(s.L) * double(s.vInK ? s.D : s.D + Dv) * double(es);
  const double flops = 2.0 * double(s.B) * double(s.H) * visiblePairs(s.T, s.L, s.causal) * double(s.D + Dv);

  try {
    const View qv = tensor4(opt_.layout, s.B, s.H, s.T, s.D);
    const View ov = tensor4(opt_.layout, s.B, s.H, s.T, Dv);
    const View lv = View::dense({s.B, s.H, s.T});
    const int64_t pagesPerSeq = paged ? (s.L + s.pageSize - 1) / s.pageSize : 0;
    const int64_t numPages = s.B * pagesPerSeq;
    auto cacheView = [&](int64_t width) {
      return paged ? View::dense({numPages, s.pageSize, s.HK, width}) : tensor4(opt_.layout, s.B, s.HK, s.L, width);
    };
    const View kView = cacheView(s.D);
    // V aliasing K keeps K's strides and offset, narrowed to the first Dv columns of each row.
    View vView = cacheView(Dv);
    if (s.vInK) {
      vView = kView;
      vView.dims[3] = Dv;
    }

    // --sinks: host logits for the checks, a copy in the handle's memory for the timed calls.
    const std::vector<float> sinks = opt_.sinks ? sinkLogits(s.H) : std::vector<float>();
    HostBlock hSinks(std::max<size_t>(1, sinks.size()) * 4);
    if (opt_.sinks) std::memcpy(hSinks.data(), sinks.data(), sinks.size() * 4);
    Buffer dSinks(mem_, sinks.size() * 4);
    if (opt_.sinks) dSinks.upload(hSinks);
    AttnDesc attn(s.causal, false, static_cast<const float *>(dSinks.get()));
    TensorDesc qD(s.dtype, qv), kD(s.dtype, kView), vD(s.dtype, vView), oD(s.dtype, ov), lD(FLASHATTN_DATA_FP32, lv);

    // Per-sequence lengths and the block table, in host memory (for the HOST check) and in the handle's memory.
    std::vector<int32_t> lengths(size_t(s.B), int32_t(s.L));
    std::vector<int32_t> table(static_cast<size_t>(numPages));
    if (paged) {
      std::iota(table.begin(), table.end(), 0);
      NormalSource shuffle(7);
      if (!opt_.pagesInOrder)
        for (size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[shuffle.bits() % i]);
    }
    HostBlock hLengths(lengths.size() * 4), hTable(std::max<size_t>(1, table.size()) * 4);
    std::memcpy(hLengths.data(), lengths.data(), lengths.size() * 4);
    if (paged) std::memcpy(hTable.data(), table.data(), table.size() * 4);
    Buffer dLengths(mem_, lengths.size() * 4), dTable(mem_, paged ? table.size() * 4 : 0);
    dLengths.upload(hLengths);
    if (paged) dTable.upload(hTable);
    SeqDesc seq;
    apiCheck(flashAttnSetSeqKvLengths(seq, s.B, static_cast<const int32_t *>(dLengths.get())),
             "flashAttnSetSeqKvLengths");
    if (paged)
      apiCheck(flashAttnSetSeqPaged(seq, s.B, static_cast<const int32_t *>(dTable.get()), pagesPerSeq),
               "flashAttnSetSeqPaged");
    row.kernel = support(FLASHATTN_OP_DECODE_CHUNK, attn, seq, qD, kD, vD, oD);

    HostBlock hq = randomTensor(s.dtype, qv.extent(), 11);
    HostBlock hk = randomTensor(s.dtype, kView.extent(), 12);
    HostBlock hvOwn = s.vInK ? HostBlock() : randomTensor(s.dtype, vView.extent(), 13);
    const HostBlock &hv = s.vInK ? hk : hvOwn;
    if (paged && s.L % s.pageSize) {
      // Slots past the end of each sequence hold NaN: a kernel that reads them spoils the output. V inside K gets
      // them from K's rows.
      for (int64_t b = 0; b < s.B; ++b) {
        const int64_t page = table[size_t(b * pagesPerSeq + pagesPerSeq - 1)];
        for (int64_t r = s.L % s.pageSize; r < s.pageSize; ++r)
          for (int64_t h = 0; h < s.HK; ++h) {
            const int64_t kOff = page * kView.strides[0] + r * kView.strides[1] + h * kView.strides[2];
            for (int64_t d = 0; d < s.D; ++d) storeElement(hk.data(), s.dtype, kOff + d, NAN);
            if (s.vInK) continue;
            const int64_t vOff = page * vView.strides[0] + r * vView.strides[1] + h * vView.strides[2];
            for (int64_t d = 0; d < Dv; ++d) storeElement(hvOwn.data(), s.dtype, vOff + d, NAN);
          }
      }
    }

    const double setBytes = kvBytes + double(qv.extent()) * double(es);
    const int64_t copies = mem_.cuda() ? std::max<int64_t>(1, int64_t(std::ceil(kRotationBytes / setBytes))) : 1;
    row.copies = copies;
    std::vector<Buffer> cq, ck, cvb;
    for (int64_t c = 0; c < copies; ++c) {
      cq.emplace_back(mem_, hq.bytes());
      ck.emplace_back(mem_, hk.bytes());
      cq.back().upload(hq);
      ck.back().upload(hk);
      if (s.vInK) continue;
      cvb.emplace_back(mem_, hv.bytes());
      cvb.back().upload(hv);
    }
    Buffer dout(mem_, size_t(ov.extent()) * es), dlse(mem_, size_t(lv.extent()) * 4);
    size_t wsBytes = 0;
    apiCheck(flashAttnDecodeChunkGetWorkspaceSize(handle_, attn, seq, qD, kD, vD, oD, lD, s.chunks, &wsBytes),
             "flashAttnDecodeChunkGetWorkspaceSize");
    Buffer ws(mem_, wsBytes);
    auto run = [&](int64_t i) {
      const size_t c = size_t(i % copies);
      return flashAttnDecodeChunk(handle_, attn, seq, qD, cq[c].get(), kD, ck[c].get(), vD,
                                  s.vInK ? ck[c].get() : cvb[c].get(), oD, dout.get(), lD,
                                  static_cast<float *>(dlse.get()), s.chunks, ws.get(), wsBytes);
    };
    dout.poison();
    dlse.poison();
    apiCheck(run(0), "flashAttnDecodeChunk");
    mem_.synchronize();

    HostBlock ho, hl;
    if (opt_.check) {
      const auto t0 = std::chrono::steady_clock::now();
      ho = dout.download();
      hl = dlse.download();
      Pick batch = allOf(s.B);
      HeadPick heads{allOf(s.H), allOf(s.HK)};
      const double perHead = double(s.T) * double(s.L) * double(s.D + Dv) * 2;
      if (double(s.B) * double(s.H) * perHead > budgetFlops()) {
        batch = Pick{s.B - 1, 1, 1};
        heads = pairOfHeads(s.H, s.HK);
        // With one KV head any query heads share its cache slice: as many as the budget takes, spread over all.
        if (s.HK == 1)
          heads.q = spread(s.H, std::clamp<int64_t>(int64_t(budgetFlops() / perHead), heads.q.count, s.H));
      }
      const View q1 = qv.pick(0, batch).pick(1, heads.q);
      const View o1 = ov.pick(0, batch).pick(1, heads.q);
      const View l1 = lv.pick(0, batch).pick(1, heads.q);
      auto cacheSlice = [&](const View &v) { return paged ? v.pick(2, heads.kv) : v.pick(0, batch).pick(1, heads.kv); };
      const View k1 = cacheSlice(kView), v1 = cacheSlice(vView);
      const View oRef = o1.compact(), lRef = l1.compact();
      HostBlock refO(size_t(oRef.elements()) * es), refL(size_t(lRef.elements()) * 4);
      const int32_t *lens = reinterpret_cast<const int32_t *>(hLengths.data()) + batch.start;
      const int32_t *pageIds = reinterpret_cast<const int32_t *>(hTable.data()) + batch.start * pagesPerSeq;
      if (useOracle()) {
        // The cache rows of each sequence in token order (through the block table when paged), as dense
        // [batch, kvHeads, L, D] and [batch, kvHeads, L, Dv]; rows past a sequence's length stay 0 and are not read.
        bench_oracle::Shape os;
        os.B = batch.count, os.H = heads.q.count, os.HK = heads.kv.count, os.Sq = s.T, os.Sk = s.L, os.D = s.D;
        os.Dv = Dv, os.causal = s.causal;
        for (float x : pickPerHead(sinks, heads.q)) os.sinks.push_back(x);
        std::vector<double> ck(size_t(os.B * os.HK * os.Sk * os.D)), cv2(size_t(os.B * os.HK * os.Sk * Dv));
        auto rowAt = [&](const View &v, int64_t b, int64_t h, int64_t t) {
          return paged ? v.offset + pageIds[b * pagesPerSeq + t / s.pageSize] * v.strides[0] +
                             (t % s.pageSize) * v.strides[1] + h * v.strides[2]
                       : v.offset + b * v.strides[0] + h * v.strides[1] + t * v.strides[2];
        };
        for (int64_t b = 0; b < os.B; ++b) {
          os.keyLengths.push_back(lens[b]);
          for (int64_t h = 0; h < os.HK; ++h)
            for (int64_t t = 0; t < lens[b]; ++t) {
              const int64_t kRow = rowAt(k1, b, h, t), vRow = rowAt(v1, b, h, t);
              const size_t at = size_t((b * os.HK + h) * os.Sk + t);
              for (int64_t d = 0; d < s.D; ++d) ck[at * size_t(s.D) + size_t(d)] = loadElement(hk.data(), s.dtype, kRow + d);
              for (int64_t d = 0; d < Dv; ++d) cv2[at * size_t(Dv) + size_t(d)] = loadElement(hv.data(), s.dtype, vRow + d);
            }
        }
        std::vector<double> o, l;
        bench_oracle::forward(os, gather(hq.data(), q1, s.dtype), ck, cv2, o, l);
        storeRounded(o, refO.data(), s.dtype);
        storeFloats(l, refL.data());
      } else {
        TensorDesc q1D(s.dtype, q1), k1D(s.dtype, k1), v1D(s.dtype, v1), o1D(s.dtype, oRef),
            l1D(FLASHATTN_DATA_FP32, lRef);
        SeqDesc hostSeq;
        apiCheck(flashAttnSetSeqKvLengths(hostSeq, batch.count, lens), "HOST flashAttnSetSeqKvLengths");
        if (paged)
          apiCheck(flashAttnSetSeqPaged(hostSeq, batch.count, pageIds, pagesPerSeq), "HOST flashAttnSetSeqPaged");
        // The HOST handle reads host memory, and only the sliced heads' sinks.
        const std::vector<float> sinks1 = pickPerHead(sinks, heads.q);
        const AttnDesc hostAttn(s.causal, false, opt_.sinks ? sinks1.data() : nullptr);
        size_t hostWs = 0;
        apiCheck(
            flashAttnDecodeChunkGetWorkspaceSize(host_, hostAttn, hostSeq, q1D, k1D, v1D, o1D, l1D, s.chunks, &hostWs),
            "HOST flashAttnDecodeChunkGetWorkspaceSize");
        HostBlock hws(hostWs);
        // V inside K: the HOST call gets the same pointer for both, as the device call did.
        apiCheck(flashAttnDecodeChunk(host_, hostAttn, hostSeq, q1D, hq.data() + q1.offset * es, k1D,
                                      hk.data() + k1.offset * es, v1D, hv.data() + v1.offset * es, o1D, refO.data(),
                                      l1D, reinterpret_cast<float *>(refL.data()), s.chunks,
                                      hostWs ? hws.data() : nullptr, hostWs),
                 "HOST flashAttnDecodeChunk");
      }
      const ErrorStats e = compare(ho.data(), o1, refO.data(), oRef, s.dtype);
      const LseStats le = compareLse(reinterpret_cast<const float *>(hl.data()), l1,
                                     reinterpret_cast<const float *>(refL.data()), lRef);
      row.checked = true;
      row.reference = referenceName();
      row.maxErr = e.nonFinite ? INFINITY : e.maxAbs;
      row.normwise = e.normwise();
      row.lseErr = le.mismatched ? INFINITY : le.maxAbs;
      row.pass = row.normwise <= normwiseGate(s.dtype) && row.lseErr <= kLseGate;
      row.checkScope = pickText("batch", "batches", batch, s.B) + ", " + pickText("head", "heads", heads.q, s.H);
      if (e.nonFinite) row.checkScope += ", " + std::to_string(e.nonFinite) + " non-finite outputs";
      row.checkSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    row.ms = median(timeCalls(run, 1, "flashAttnDecodeChunk"));
    takeCallStats(row);
    row.kvGBps = kvBytes / (row.ms * 1e-3) / 1e9;
    row.tflops = flops / (row.ms * 1e-3) / 1e12;
    if (row.checked) checkRepeatable(row, ho, hl, dout, dlse);
  } catch (const std::exception &e) {
    row.error = e.what();
    if (auto *api = dynamic_cast<const ApiError *>(&e))
      row.notSupported = api->status == FLASHATTN_STATUS_NOT_SUPPORTED;
  }
  record(row);
}

// ---------------------------------------------------------------------------------------------------------------------
// Plans: what a run consists of

// Chunked prefill over a paged cache and over a dense one holding the same keys: rows "chunked" with the page size,
// and with page size 0 for the dense cache, whose ratio report.py prints. The paged row is checked against the dense
// row's output (bitwise where one kernel family serves both, else by the gates); the dense problem is a plain ragged
// forward, checked by the fwd rows.
void Bench::chunked(const ChunkedShape &s) {
  Row pagedRow = chunkedRow(s, true), denseRow = chunkedRow(s, false);
  const size_t es = elementBytes(s.dtype);
  const int64_t Dv = s.dimV();
  const double flops = 2.0 * double(s.B) * double(s.H) * visiblePairs(s.T, s.L, s.causal) * double(s.D + Dv);
  try {
    const int64_t pagesPerSeq = (s.L + s.pageSize - 1) / s.pageSize, numPages = s.B * pagesPerSeq;
    const View qv = View::dense({s.B * s.T, s.H, s.D}), ov = View::dense({s.B * s.T, s.H, Dv});
    const View lv = View::dense({s.B * s.T, s.H});
    const View dv = View::dense({s.B * s.L, s.HK, s.D}), pv = View::dense({numPages, s.pageSize, s.HK, s.D});
    const View dvV = View::dense({s.B * s.L, s.HK, Dv}), pvV = View::dense({numPages, s.pageSize, s.HK, Dv});
    TensorDesc qD(s.dtype, qv), oD(s.dtype, ov), lD(FLASHATTN_DATA_FP32, lv), dD(s.dtype, dv), pD(s.dtype, pv);
    TensorDesc dVD(s.dtype, dvV), pVD(s.dtype, pvV);
    AttnDesc attn(s.causal);

    // Index arrays: the query offsets, the dense keys' offsets, the lengths and a shuffled block table.
    std::vector<int32_t> cuQ(size_t(s.B) + 1), cuK(size_t(s.B) + 1), lengths(size_t(s.B), int32_t(s.L));
    for (int64_t b = 0; b <= s.B; ++b) cuQ[size_t(b)] = int32_t(b * s.T), cuK[size_t(b)] = int32_t(b * s.L);
    std::vector<int32_t> table(static_cast<size_t>(numPages));
    std::iota(table.begin(), table.end(), 0);
    NormalSource shuffle(17);
    for (size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[shuffle.bits() % i]);
    auto upload = [&](const std::vector<int32_t> &v) {
      HostBlock h(v.size() * 4);
      std::memcpy(h.data(), v.data(), v.size() * 4);
      auto b = std::make_unique<Buffer>(mem_, v.size() * 4);
      b->upload(h);
      return b;
    };
    const auto dCuQ = upload(cuQ), dCuK = upload(cuK), dLengths = upload(lengths), dTable = upload(table);
    SeqDesc denseSeq, pagedSeq;
    const auto i32 = [](const std::unique_ptr<Buffer> &b) { return static_cast<const int32_t *>(b->get()); };
    apiCheck(flashAttnSetSeqRagged(denseSeq, s.B, i32(dCuQ), i32(dCuK), s.T, s.L), "flashAttnSetSeqRagged");
    apiCheck(flashAttnSetSeqRagged(pagedSeq, s.B, i32(dCuQ), nullptr, s.T, s.L), "flashAttnSetSeqRagged");
    apiCheck(flashAttnSetSeqKvLengths(pagedSeq, s.B, i32(dLengths)), "flashAttnSetSeqKvLengths");
    apiCheck(flashAttnSetSeqPaged(pagedSeq, s.B, i32(dTable), pagesPerSeq), "flashAttnSetSeqPaged");
    denseRow.kernel = support(FLASHATTN_OP_FORWARD, attn, denseSeq, qD, dD, dVD, oD);
    pagedRow.kernel = support(FLASHATTN_OP_FORWARD, attn, pagedSeq, qD, pD, pVD, oD);

    // The same keys in both caches; the slots of the last pages past L hold NaN.
    HostBlock hq = randomTensor(s.dtype, qv.extent(), 21);
    HostBlock hk = randomTensor(s.dtype, dv.extent(), 22), hv = randomTensor(s.dtype, dvV.extent(), 23);
    HostBlock pk(size_t(pv.extent()) * es), pvv(size_t(pvV.extent()) * es);
    for (int64_t i = 0; i < pv.extent(); ++i) storeElement(pk.data(), s.dtype, i, NAN);
    for (int64_t i = 0; i < pvV.extent(); ++i) storeElement(pvv.data(), s.dtype, i, NAN);
    const size_t kRowBytes = size_t(s.HK * s.D) * es, vRowBytes = size_t(s.HK * Dv) * es;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t j = 0; j < s.L; ++j) {
        const int64_t page = table[size_t(b * pagesPerSeq + j / s.pageSize)];
        const size_t to = size_t(page * s.pageSize + j % s.pageSize), from = size_t(b * s.L + j);
        std::memcpy(pk.data() + to * kRowBytes, hk.data() + from * kRowBytes, kRowBytes);
        std::memcpy(pvv.data() + to * vRowBytes, hv.data() + from * vRowBytes, vRowBytes);
      }
    Buffer q(mem_, hq.bytes()), k(mem_, hk.bytes()), v(mem_, hv.bytes()), kp(mem_, pk.bytes()), vp(mem_, pvv.bytes());
    q.upload(hq), k.upload(hk), v.upload(hv), kp.upload(pk), vp.upload(pvv);
    Buffer o(mem_, size_t(ov.extent()) * es), lse(mem_, size_t(lv.extent()) * 4);
    auto call = [&](bool paged) {
      return flashAttnForward(handle_, attn, paged ? pagedSeq : denseSeq, qD, q.get(), paged ? pD : dD,
                              paged ? kp.get() : k.get(), paged ? pVD : dVD, paged ? vp.get() : v.get(), oD, o.get(), lD,
                              static_cast<float *>(lse.get()), nullptr, 0);
    };
    HostBlock denseO, denseL;
    for (const bool paged : {false, true}) {
      Row &row = paged ? pagedRow : denseRow;
      o.poison();
      lse.poison();
      apiCheck(call(paged), "flashAttnForward");
      mem_.synchronize();
      const HostBlock firstO = o.download(), firstL = lse.download();
      const std::vector<double> ms = timeCalls([&](int64_t) { return call(paged); }, 0, "flashAttnForward");
      row.ms = median(ms);
      takeCallStats(row);
      row.tflops = flops / (row.ms * 1e-3) / 1e12;
      if (!paged) {
        denseRow.checkScope = "not checked here: the dense cache's ragged forward is what the fwd rows check";
        denseO = o.download();
        denseL = lse.download();
        continue;
      }
      if (!opt_.check) continue;
      row.checked = true;
      const bool sameFamily = denseRow.kernel.substr(0, denseRow.kernel.find(' ')) ==
                              pagedRow.kernel.substr(0, pagedRow.kernel.find(' '));
      row.reference = "same problem on a dense cache";
      std::vector<double> out(size_t(ov.extent())), ref(out.size());
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = loadElement(firstO.data(), s.dtype, int64_t(i));
        ref[i] = loadElement(denseO.data(), s.dtype, int64_t(i));
      }
      double err = 0, diff2 = 0, ref2 = 0;
      bool finite = true;
      for (size_t i = 0; i < out.size(); ++i) {
        finite = finite && std::isfinite(out[i]);
        err = std::max(err, std::fabs(out[i] - ref[i]));
        diff2 += (out[i] - ref[i]) * (out[i] - ref[i]);
        ref2 += ref[i] * ref[i];
      }
      row.maxErr = err;
      row.normwise = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
      const double tol = s.dtype == FLASHATTN_DATA_BF16 ? 5e-3 : s.dtype == FLASHATTN_DATA_FP16 ? 6e-4 : 1e-5;
      if (sameFamily) {
        row.pass = finite && sameBytes(firstO, denseO) && sameBytes(firstL, denseL);
        row.checkScope = "bitwise equal to the dense cache's output (one kernel family serves both)";
      } else {
        row.pass = finite && row.normwise <= tol;
        row.checkScope = "normwise against the dense cache's output (different kernel families)";
      }
      checkRepeatable(row, firstO, firstL, o, lse);
    }
  } catch (const std::exception &e) {
    for (Row *row : {&denseRow, &pagedRow}) {
      if (std::isfinite(row->ms)) continue;
      row->error = e.what();
      if (auto *api = dynamic_cast<const ApiError *>(&e)) row->notSupported = api->status == FLASHATTN_STATUS_NOT_SUPPORTED;
    }
  }
  record(std::move(denseRow));
  record(std::move(pagedRow));
}

struct Plan {
  std::vector<PrefillShape> prefill;
  bool fwd = false, bwd = false;
  std::vector<DecodeShape> decode;
  std::vector<ChunkedShape> chunked;  // two rows each: paged and dense cache
  bool bwdDet = false;  // --deterministic: a bwd-det row after each bwd row
  size_t rows() const {
    return prefill.size() * (size_t(fwd) + size_t(bwd) + size_t(bwd && bwdDet)) + decode.size() + 2 * chunked.size();
  }
};

// Shape options not given: a GPU default, or one the HOST backend finishes in seconds.
void resolveShape(Options &o, bool cuda) {
  if (!o.batch) o.batch = cuda ? 2 : 1;
  if (!o.heads) o.heads = o.kvHeads && (cuda ? 16 : 4) % o.kvHeads ? o.kvHeads : cuda ? 16 : 4;
  if (!o.kvHeads) o.kvHeads = o.heads;
  if (!o.seq) o.seq = cuda ? 1024 : 256;
  if (!o.seqK) o.seqK = o.seq;
}

Plan makePlan(const Options &o, bool cuda) {
  Plan p;
  p.fwd = o.op == "fwd" || o.op == "all";
  p.bwd = o.op == "bwd" || o.op == "all";
  const bool decodeOp = o.op == "decode" || o.op == "all";
  p.bwdDet = o.deterministic;
  if (o.demo) {
    p.fwd = p.bwd = true;
    if (cuda) {
      for (bool causal : {false, true})
        p.prefill.push_back({FLASHATTN_DATA_BF16, 4, 16, 16, 4096, 4096, 128, causal, 128});
      p.decode.push_back({FLASHATTN_DATA_BF16, 8, 32, 8, 1, 8192, 128, false, 0, 0});
      p.decode.push_back({FLASHATTN_DATA_BF16, 8, 32, 8, 1, 8192, 128, false, 0, 64});
    } else {
      for (bool causal : {false, true}) p.prefill.push_back({FLASHATTN_DATA_BF16, 1, 4, 2, 256, 256, 64, causal, 64});
      p.decode.push_back({FLASHATTN_DATA_BF16, 2, 8, 2, 1, 1000, 64, false, 0, 0});
      p.decode.push_back({FLASHATTN_DATA_BF16, 2, 8, 2, 1, 1000, 64, false, 3, 16});
    }
    return p;
  }
  if (o.sweep == "chunked") {
    // The inference engines' chunked prefill: 512 new tokens after a long cached prefix, GQA 32/8, in vLLM's pages of
    // 16 keys; at one prefix also SGLang's pages of one key and pages of 64.
    const flashAttnDataType_t dtype = o.dtypeGiven ? o.dtype : FLASHATTN_DATA_BF16;
    for (int64_t prefix : {4096, 8192, 16384}) p.chunked.push_back({dtype, 4, 32, 8, 512, prefix + 512, 128, true, 16});
    for (int64_t pageSize : {1, 64}) p.chunked.push_back({dtype, 4, 32, 8, 512, 8192 + 512, 128, true, pageSize});
    // DeepSeek-V3's prefill over a paged cache: Q/K 192, V/O 128, 128 heads.
    for (int64_t pageSize : {16, 64})
      p.chunked.push_back({dtype, 1, 128, 128, 512, 8192 + 512, 192, true, pageSize, 128});
    return p;
  }
  if (o.sweep == "mla") {
    // --dtype, --dim and --dim-v filter both parts like the prefill sweep, --op picks them (fwd/bwd: prefill, decode:
    // decode). The HOST backend would take hours over the GPU shapes: it runs each kind of row at a size it finishes
    // in seconds (`--backend cuda --list --sweep mla` lists the GPU plan on any machine).
    const bool bf16 = !o.dtypeGiven || o.dtype == FLASHATTN_DATA_BF16;
    // DeepSeek-V3's prefill attention: the latent KV expanded to 128 heads of K (128 no-PE + 64 RoPE dims = 192) and
    // V (128), causal, as bench/peers_mla.py times the peers.
    if (bf16 && (!o.dim || o.dim == 192) && (!o.dimV || o.dimV == 128) && (p.fwd || p.bwd)) {
      if (!cuda) p.prefill.push_back({FLASHATTN_DATA_BF16, 1, 8, 8, 256, 256, 192, true, 128});
      for (int64_t S : {4096, 8192, 16384})
        if (cuda) p.prefill.push_back({FLASHATTN_DATA_BF16, 16384 / S, 128, 128, S, S, 192, true, 128});
    }
    // Its absorbed decode: Q/K of 576 (512 latent + 64 RoPE), V/O of 512 read from K's first 512 columns (one
    // cache, one KV head), 128 query heads and the 16 of one GPU under tensor parallelism 8. Four of the five
    // caches hold >= 256 MiB (B*L*576*2 bytes), where the stream is the cost; then 2 query tokens (MTP) and a paged
    // cache of 64-row pages on one of them.
    if (bf16 && (!o.dim || o.dim == 576) && (!o.dimV || o.dimV == 512) && decodeOp) {
      auto mla = [&](int64_t B, int64_t H, int64_t T, int64_t L, int64_t page) {
        DecodeShape d{FLASHATTN_DATA_BF16, B, H, 1, T, L, 576, T > 1, o.chunks, page};
        d.Dv = 512;
        d.vInK = true;
        p.decode.push_back(d);
      };
      // (batch, cache length); on HOST L 1000 is no multiple of the 64-row page, so the paged row has NaN slots past
      // each sequence's end.
      using Shapes = std::vector<std::pair<int64_t, int64_t>>;
      const Shapes shapes = cuda ? Shapes{{1, 32768}, {8, 32768}, {32, 8192}, {64, 4096}, {128, 2048}}
                                 : Shapes{{2, 1000}};
      for (int64_t H : {128, 16})
        for (const auto &[B, L] : shapes) mla(B, H, 1, L, o.pageSize);
      const int64_t B = cuda ? 32 : 2, L = cuda ? 8192 : 1000;
      mla(B, 128, 2, L, o.pageSize);
      if (o.pageSize != 64) mla(B, 128, 1, L, 64);
    }
    return p;
  }
  if (o.op == "chunked") {
    p.chunked.push_back({o.dtype, o.batch, o.heads, o.kvHeads, o.seq, std::max(o.seqK, o.seq), o.dim ? o.dim : cuda ? 128 : 64,
                         o.causal, o.pageSize ? o.pageSize : 16, o.dimV});
    return p;
  }
  if (!o.sweep.empty()) {
    if (o.sweep == "prefill" || o.sweep == "all") {
      std::vector<flashAttnDataType_t> types{FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16};
      if (o.dtypeGiven) types = {o.dtype};
      for (flashAttnDataType_t t : types) {
        // Heads 2048 / D rounded down as peers.py has them (21 at D96, 10 at D192), so the rows join the peers'.
        // The peers time D96 and D192 in bf16 only.
        for (int64_t D : {64, 96, 128, 192, 256}) {
          if ((o.dim && D != o.dim) || (o.dimV && D != o.dimV)) continue;
          if ((D == 96 || D == 192) && t != FLASHATTN_DATA_BF16) continue;
          for (int64_t S = 512; S <= 16384; S *= 2)
            for (bool causal : {false, true})
              p.prefill.push_back({t, 16384 / S, 2048 / D, 2048 / D, S, S, D, causal, D});
        }
        // GQA 32/8 at D128 (Llama-3-8B's attention), in bf16 as the peers time it.
        if (t == FLASHATTN_DATA_BF16 && (!o.dim || o.dim == 128) && (!o.dimV || o.dimV == 128))
          for (int64_t S : {2048, 8192, 16384})
            for (bool causal : {false, true}) p.prefill.push_back({t, 16384 / S, 32, 8, S, S, 128, causal, 128});
      }
    }
    // (batch, cache length) of the decode rows, GQA 32/8 D128 bf16, as peers.py times them.
    const std::pair<int64_t, int64_t> decodeShapes[] = {{1, 8192},  {1, 65536}, {1, 131072}, {8, 8192},
                                                        {8, 32768}, {32, 4096}, {64, 8192}};
    // `all` runs the decode sweep and the serving sweep, whose dense one-token rows are the same problems.
    auto addDecode = [&](const DecodeShape &d) {
      for (const DecodeShape &e : p.decode)
        if (e.dtype == d.dtype && e.B == d.B && e.H == d.H && e.HK == d.HK && e.T == d.T && e.L == d.L &&
            e.D == d.D && e.causal == d.causal && e.chunks == d.chunks && e.pageSize == d.pageSize)
          return;
      p.decode.push_back(d);
    };
    if (o.sweep == "decode" || o.sweep == "all")
      for (const auto &[B, L] : decodeShapes)
        addDecode({FLASHATTN_DATA_BF16, B, 32, 8, 1, L, 128, false, o.chunks, o.pageSize});
    if (o.sweep == "serving" || o.sweep == "all") {
      // Each shape from a dense cache and from paged caches (a shuffled block table), for report.py's paged/dense.
      for (const auto &[B, L] : decodeShapes)
        for (int64_t page : {0, 1, 16, 64})
          addDecode({FLASHATTN_DATA_BF16, B, 32, 8, 1, L, 128, false, o.chunks, page});
      // Speculative decoding's verify step and the like: several new tokens per sequence, each seeing the cached
      // prefix and the new tokens up to itself (bottom-right causal). Only caches of 256 MiB and more: the K+V read
      // stays the cost there, so GB/s and its share of the copy bandwidth remain the measure.
      for (const auto &[B, L] : decodeShapes) {
        if (2.0 * double(B) * 8 * double(L) * 128 * 2 < 256.0 * 1024 * 1024) continue;
        for (int64_t T : {2, 4, 8, 16}) addDecode({FLASHATTN_DATA_BF16, B, 32, 8, T, L, 128, true, o.chunks, 0});
      }
    }
    if (o.op == "decode") p.prefill.clear();
    if (o.op == "fwd" || o.op == "bwd") p.decode.clear();
    return p;
  }
  const int64_t dim = o.dim ? o.dim : cuda ? 128 : 64;
  if (p.fwd || p.bwd)
    p.prefill.push_back({o.dtype, o.batch, o.heads, o.kvHeads, o.seq, o.seqK, dim, o.causal, o.dimV ? o.dimV : dim});
  if (decodeOp)
    p.decode.push_back({o.dtype, o.batch, o.heads, o.kvHeads, o.qTokens, o.seqK, dim, o.causal, o.chunks, o.pageSize});
  return p;
}

// The rows a run of the plan records, in its order.
std::vector<Row> plannedRows(const Plan &p, const Options &o) {
  std::vector<Row> rows;
  for (const PrefillShape &s : p.prefill) {
    if (p.fwd) rows.push_back(prefillRow(s, "fwd", o.sinks, o.softcap, o.alibi));
    if (p.bwd) rows.push_back(prefillRow(s, "bwd", o.sinks, o.softcap, o.alibi));
    if (p.bwd && p.bwdDet) rows.push_back(prefillRow(s, "bwd-det", o.sinks, o.softcap, o.alibi));
  }
  for (const DecodeShape &s : p.decode) rows.push_back(decodeRow(s, o.sinks, o.pagesInOrder));
  for (const ChunkedShape &s : p.chunked) {
    rows.push_back(chunkedRow(s, false));
    rows.push_back(chunkedRow(s, true));
  }
  return rows;
}

// --list: the rows of the plan for a CUDA or a HOST handle, one per line.
int listPlan(Options opt, bool cuda) {
  try {
    resolveShape(opt, cuda);
    const Plan plan = makePlan(opt, cuda);
    for (const Row &r : plannedRows(plan, opt)) std::printf("%s\n", shapeText(r).c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "flashattn-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  try {
    opt = parseOptions(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "flashattn-bench: %s\n", e.what());
    usage(stderr);
    return 2;
  }
  // A named backend's plan needs no handle: the GPU plan can be listed (and checked) on a machine without a GPU.
  if (opt.list && opt.backend != "auto") return listPlan(opt, opt.backend == "cuda");

#if defined(FLASHATTN_BENCH_CUDA)
  if (opt.device >= 0 && cudaSetDevice(opt.device) != cudaSuccess) {
    std::fprintf(stderr, "flashattn-bench: cannot use CUDA device %d\n", opt.device);
    return 2;
  }
#endif

  const flashAttnBackend_t wanted = opt.backend == "cuda"   ? FLASHATTN_BACKEND_CUDA
                                    : opt.backend == "host" ? FLASHATTN_BACKEND_HOST
                                                            : FLASHATTN_BACKEND_AUTO;
  flashAttnHandle_t handle = nullptr, host = nullptr;
  flashAttnStatus_t st =
      wanted == FLASHATTN_BACKEND_AUTO ? flashAttnCreate(&handle) : flashAttnCreateWithBackend(&handle, wanted);
  if (st != FLASHATTN_STATUS_SUCCESS) {
    std::fprintf(stderr, "flashattn-bench: cannot create a %s handle: %s: %s\n", opt.backend.c_str(),
                 flashAttnGetErrorString(st), lastLibraryMessage().c_str());
    // 77: CTest's "skipped", for the GPU demo test on a machine without a GPU.
    return st == FLASHATTN_STATUS_NO_DEVICE ? 77 : 1;
  }
  flashAttnBackend_t backend = FLASHATTN_BACKEND_HOST;
  flashAttnGetBackend(handle, &backend);
#if !defined(FLASHATTN_BENCH_CUDA)
  if (backend == FLASHATTN_BACKEND_CUDA) {
    // This bench was built without the CUDA runtime, so it has no device memory to give the CUDA handle.
    std::fprintf(stderr, "flashattn-bench: built without CUDA support; benchmarking the HOST backend\n");
    flashAttnDestroy(handle);
    if (flashAttnCreateWithBackend(&handle, FLASHATTN_BACKEND_HOST) != FLASHATTN_STATUS_SUCCESS) return 1;
    backend = FLASHATTN_BACKEND_HOST;
  }
#endif
  const bool cuda = backend == FLASHATTN_BACKEND_CUDA;
  st = flashAttnCreateWithBackend(&host, FLASHATTN_BACKEND_HOST);
  if (st != FLASHATTN_STATUS_SUCCESS) {
    std::fprintf(stderr, "flashattn-bench: cannot create the HOST reference handle: %s: %s\n",
                 flashAttnGetErrorString(st), lastLibraryMessage().c_str());
    flashAttnDestroy(handle);
    return 1;
  }

  std::string deviceName = "host CPU";
#if defined(FLASHATTN_BENCH_CUDA)
  if (cuda) {
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
      char buf[384];
      std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
                    prop.multiProcessorCount);
      deviceName = buf;
    }
  }
#endif
  if (opt.list) {
    // The plan depends on the backend (the demo's and the single shape's defaults), so it is listed only now.
    const int status = listPlan(opt, cuda);
    flashAttnDestroy(host);
    flashAttnDestroy(handle);
    return status;
  }
  const int32_t version = flashAttnGetVersion();
  std::printf("flashattn-bench: libflashattn %d.%d.%d (header %d.%d.%d), backend %s on %s\n", version / 10000,
              version / 100 % 100, version % 100, FLASHATTN_VERSION / 10000, FLASHATTN_VERSION / 100 % 100,
              FLASHATTN_VERSION % 100, cuda ? "CUDA" : "HOST", deviceName.c_str());
  if (!cuda) std::printf("no usable GPU: running on the HOST backend\n");
  if (!cuda && opt.sweep == "mla")
    std::printf("--sweep mla on HOST: one small shape of each kind of row (the GPU's: --backend cuda --list)\n");
  if (!opt.check)
    std::printf("results: not checked (--no-check)\n");
  else if (cuda)
    std::printf("results: checked against the HOST backend (float64 accumulation) on the same inputs\n");
  else
    std::printf("results: checked against the bench's float64 oracle (the HOST backend is not its own reference)\n");
  std::fflush(stdout);

  int failures = 0;
  try {
    resolveShape(opt, cuda);
    const Plan plan = makePlan(opt, cuda);
    Bench bench(opt, handle, host, cuda);
    bench.setPlanned(plan.rows());
    bench.setMeta(deviceName, cuda ? "CUDA" : "HOST");
    std::string lost;
    for (const PrefillShape &s : plan.prefill)
      if (lost.empty() && (lost = bench.deviceLost()).empty()) bench.prefill(s, plan.fwd, plan.bwd);
    for (const DecodeShape &s : plan.decode)
      if (lost.empty() && (lost = bench.deviceLost()).empty()) bench.decode(s);
    for (const ChunkedShape &s : plan.chunked)
      if (lost.empty() && (lost = bench.deviceLost()).empty()) bench.chunked(s);
    bench.printTable();
    failures = bench.failures();
    if (!lost.empty()) {
      std::printf("stopped after %zu of %zu rows: the CUDA context is lost (%s)\n", bench.rows().size(), plan.rows(),
                  lost.c_str());
      failures += 1;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "flashattn-bench: %s\n", e.what());
    failures = 1;
  }
  flashAttnDestroy(host);
  flashAttnDestroy(handle);
  return failures ? 1 : 0;
}
