// SPDX-License-Identifier: BSD-3-Clause
// A build without the CUDA toolkit: the CUDA backend is absent, said plainly, and AUTO picks the HOST backend.
#include "core/backend.hpp"
#include "core/error.hpp"

namespace flashattn {

std::unique_ptr<Backend> makeCudaBackend() {
  fail(FLASHATTN_STATUS_NOT_SUPPORTED,
       "this build of libflashattn has no CUDA backend (configured with FLASHATTN_ENABLE_CUDA=OFF or without nvcc)");
}

bool cudaBackendAvailable() { return false; }

}  // namespace flashattn
