// SPDX-License-Identifier: BSD-3-Clause
// Test-side tensors: strided host buffers in a chosen layout, filled from / read into the canonical float64 arrays of
// reference.hpp, plus the descriptor RAII wrappers every test uses.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "flashattn/flashattn.h"

namespace fa_test {

inline size_t elementSize(flashAttnDataType_t t) { return t == FLASHATTN_DATA_FP32 ? 4 : 2; }

inline double loadElement(const uint8_t *base, flashAttnDataType_t t, int64_t index) {
  if (t == FLASHATTN_DATA_FP32) {
    float f;
    std::memcpy(&f, base + index * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, base + index * 2, 2);
  return t == FLASHATTN_DATA_FP16 ? flashattn::fp16ToFloat(h) : flashattn::bf16ToFloat(h);
}

inline void storeElement(uint8_t *base, flashAttnDataType_t t, int64_t index, double value) {
  if (t == FLASHATTN_DATA_FP32) {
    const float f = float(value);
    std::memcpy(base + index * 4, &f, 4);
    return;
  }
  const uint16_t h = t == FLASHATTN_DATA_FP16 ? flashattn::floatToFp16(float(value)) : flashattn::floatToBf16(float(value));
  std::memcpy(base + index * 2, &h, 2);
}

// A strided tensor in host memory. `bytes` spans every addressed element (plus whatever gaps the strides leave).
struct HostTensor {
  flashAttnDataType_t dtype = FLASHATTN_DATA_FP32;
  std::vector<int64_t> dims, strides;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(flashAttnDataType_t t, std::vector<int64_t> d, std::vector<int64_t> s) : dtype(t), dims(std::move(d)), strides(std::move(s)) {
    int64_t span = 1;
    for (size_t i = 0; i < dims.size(); ++i) span += (dims[i] - 1) * strides[i];
    bytes.assign(size_t(span) * elementSize(dtype), 0);
  }
  int64_t offset(const std::vector<int64_t> &idx) const {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * strides[i];
    return off;
  }
  double at(const std::vector<int64_t> &idx) const { return loadElement(bytes.data(), dtype, offset(idx)); }
  void set(const std::vector<int64_t> &idx, double v) { storeElement(bytes.data(), dtype, offset(idx), v); }
  void fillNaN() {
    for (int64_t i = 0; i < int64_t(bytes.size() / elementSize(dtype)); ++i) storeElement(bytes.data(), dtype, i, NAN);
  }
  int64_t numElementsSpanned() const { return int64_t(bytes.size() / elementSize(dtype)); }
};

// Memory order of a [batch, heads, seq, dim] tensor: BHSD (heads outer) or BSHD (sequence outer, the usual
// interleaved layout). `rowPad` adds unused elements after each row, so strides are not the packed ones.
enum class Order { BHSD, BSHD };

inline std::vector<int64_t> stridesFor(Order order, int64_t b, int64_t h, int64_t s, int64_t d, int64_t rowPad = 0) {
  (void)b;
  const int64_t row = d + rowPad;
  if (order == Order::BHSD) return {h * s * row, s * row, row, 1};
  return {s * h * row, row, h * row, 1};
}

// Canonical [b][h][s][d] (s < maxS) -> strided rank-4 tensor.
inline HostTensor pack4(const std::vector<double> &canon, flashAttnDataType_t t, int64_t b, int64_t h, int64_t s,
                        int64_t d, Order order, int64_t rowPad = 0) {
  HostTensor out(t, {b, h, s, d}, stridesFor(order, b, h, s, d, rowPad));
  for (int64_t i0 = 0; i0 < b; ++i0)
    for (int64_t i1 = 0; i1 < h; ++i1)
      for (int64_t i2 = 0; i2 < s; ++i2)
        for (int64_t i3 = 0; i3 < d; ++i3) out.set({i0, i1, i2, i3}, canon[size_t(((i0 * h + i1) * s + i2) * d + i3)]);
  return out;
}

// Strided rank-4 tensor -> canonical [b][h][s][d].
inline std::vector<double> unpack4(const HostTensor &t) {
  const int64_t b = t.dims[0], h = t.dims[1], s = t.dims[2], d = t.dims[3];
  std::vector<double> canon(size_t(b * h * s * d));
  for (int64_t i0 = 0; i0 < b; ++i0)
    for (int64_t i1 = 0; i1 < h; ++i1)
      for (int64_t i2 = 0; i2 < s; ++i2)
        for (int64_t i3 = 0; i3 < d; ++i3) canon[size_t(((i0 * h + i1) * s + i2) * d + i3)] = t.at({i0, i1, i2, i3});
  return canon;
}

// Canonical values rounded to the storage type, so the reference sees exactly what the kernel reads.
inline std::vector<double> randomValues(std::mt19937_64 &rng, size_t n, flashAttnDataType_t t, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(n);
  uint8_t tmp[4];
  for (auto &x : v) {
    storeElement(tmp, t, 0, dist(rng));
    x = loadElement(tmp, t, 0);
  }
  return v;
}

// RAII descriptors, so every early test exit still destroys them.
struct TensorDesc {
  flashAttnTensorDescriptor_t d = nullptr;
  TensorDesc() {
    if (flashAttnCreateTensorDescriptor(&d) != FLASHATTN_STATUS_SUCCESS) throw std::runtime_error("create tensor desc");
  }
  explicit TensorDesc(const HostTensor &t) : TensorDesc() { set(t.dtype, t.dims, t.strides); }
  flashAttnStatus_t set(flashAttnDataType_t t, const std::vector<int64_t> &dims, const std::vector<int64_t> &strides) {
    return flashAttnSetTensorDescriptor(d, t, int32_t(dims.size()), dims.data(), strides.data());
  }
  ~TensorDesc() { flashAttnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc &) = delete;
  TensorDesc &operator=(const TensorDesc &) = delete;
  operator flashAttnTensorDescriptor_t() const { return d; }
};

struct AttnDesc {
  flashAttnAttentionDescriptor_t d = nullptr;
  AttnDesc() {
    if (flashAttnCreateAttentionDescriptor(&d) != FLASHATTN_STATUS_SUCCESS) throw std::runtime_error("create attn desc");
  }
  ~AttnDesc() { flashAttnDestroyAttentionDescriptor(d); }
  AttnDesc(const AttnDesc &) = delete;
  AttnDesc &operator=(const AttnDesc &) = delete;
  operator flashAttnAttentionDescriptor_t() const { return d; }
};

struct SeqDesc {
  flashAttnSeqDescriptor_t d = nullptr;
  SeqDesc() {
    if (flashAttnCreateSeqDescriptor(&d) != FLASHATTN_STATUS_SUCCESS) throw std::runtime_error("create seq desc");
  }
  ~SeqDesc() { flashAttnDestroySeqDescriptor(d); }
  SeqDesc(const SeqDesc &) = delete;
  SeqDesc &operator=(const SeqDesc &) = delete;
  operator flashAttnSeqDescriptor_t() const { return d; }
};

struct Handle {
  flashAttnHandle_t h = nullptr;
  explicit Handle(flashAttnBackend_t backend) {
    const flashAttnStatus_t s = flashAttnCreateWithBackend(&h, backend);
    if (s != FLASHATTN_STATUS_SUCCESS) throw std::runtime_error(std::string("create handle: ") + flashAttnGetErrorString(s));
  }
  ~Handle() { flashAttnDestroy(h); }
  Handle(const Handle &) = delete;
  Handle &operator=(const Handle &) = delete;
  operator flashAttnHandle_t() const { return h; }
};

inline std::string lastError() {
  char buf[1024];
  flashAttnGetLastErrorMessage(buf, sizeof buf);
  return buf;
}

}  // namespace fa_test
