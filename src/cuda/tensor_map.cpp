// SPDX-License-Identifier: BSD-3-Clause
#include "cuda/tensor_map.hpp"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstddef>

namespace flashattn::cuda {
namespace {

// cuTensorMapEncodeTiled through the runtime's driver entry point; null when the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return PFN_cuTensorMapEncodeTiled_v12000(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

uint64_t hashOf(const TiledMapSpec &s) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { hash = (hash ^ v) * 1099511628211ull; };
  mix(uint64_t(reinterpret_cast<uintptr_t>(s.base)));
  mix(uint64_t(s.dtype));
  mix(uint64_t(s.rank));
  mix(uint64_t(s.l2Promotion256));
  for (int i = 0; i < 5; ++i) mix(s.dims[i]), mix(s.strides[i]), mix(s.boxes[i]);
  return hash ^ (hash >> 29);
}

}  // namespace

bool tensorMapEncoderAvailable() {
  // A trial encode, not only the entry point: before the driver is initialised in the process the encoder refuses
  // every map (a planner run from a process that never touched the GPU, as the chooser tests are).
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensorMapEncoder();
  if (encode == nullptr) return false;
  alignas(64) CUtensorMap map;
  cuuint64_t dims[2] = {64, 64};
  cuuint64_t strides[1] = {128};
  cuuint32_t boxes[2] = {64, 64};
  cuuint32_t elementStrides[2] = {1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, reinterpret_cast<void *>(uintptr_t(1) << 20), dims, strides,
                boxes, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool TiledMapSpec::operator==(const TiledMapSpec &o) const {
  if (base != o.base || dtype != o.dtype || rank != o.rank || l2Promotion256 != o.l2Promotion256) return false;
  for (int i = 0; i < 5; ++i)
    if (dims[i] != o.dims[i] || strides[i] != o.strides[i] || boxes[i] != o.boxes[i]) return false;
  return true;
}

bool encodeTiledMap(const TiledMapSpec &spec, CUtensorMap *map) {
  struct Entry {
    TiledMapSpec spec;
    CUtensorMap map;
    bool ok = false;
    bool used = false;
  };
  constexpr std::size_t kEntries = 64;
  thread_local Entry cache[kEntries];
  Entry &e = cache[hashOf(spec) % kEntries];
  if (!(e.used && e.spec == spec)) {
    e.used = true;
    e.spec = spec;
    e.ok = false;
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensorMapEncoder();
    if (encode != nullptr && spec.rank >= 2 && spec.rank <= 5 &&
        (spec.dtype == DType::FP16 || spec.dtype == DType::BF16)) {
      cuuint64_t dims[5];
      cuuint64_t strides[4];
      cuuint32_t boxes[5];
      cuuint32_t elementStrides[5] = {1, 1, 1, 1, 1};
      for (int i = 0; i < spec.rank; ++i) {
        dims[i] = spec.dims[i];
        boxes[i] = spec.boxes[i];
        if (i > 0) strides[i - 1] = spec.strides[i];
      }
      e.ok = encode(&e.map,
                    spec.dtype == DType::FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                    cuuint32_t(spec.rank), const_cast<void *>(spec.base), dims, strides, boxes, elementStrides,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    spec.l2Promotion256 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
    }
  }
  if (e.ok) *map = e.map;
  return e.ok;
}

}  // namespace flashattn::cuda
