// SPDX-License-Identifier: BSD-3-Clause
// One plan per call: the kernel choice and the workspace layout. The workspace-size query and the operation both ask
// the backend for the plan of the same problem, so the size returned is exactly what the run uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace flashattn {

struct Plan {
  std::string description;  // "cuda.fwd.mma_sync bf16 d128 tile 128x64 4 warps; fp32 accumulate; deterministic"
  bool deterministic = true;
  std::size_t workspaceBytes = 0;
  int32_t config = 0;     // backend/family-private: instance or tile index
  int32_t numChunks = 0;  // decode: the chunk count decided
  std::size_t workspaceOffset[4] = {0, 0, 0, 0};
};

// Workspace sub-buffers start at multiples of this (the caller's workspace is 256-byte aligned).
constexpr std::size_t kWorkspaceAlignment = 256;
inline std::size_t alignWorkspace(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

}  // namespace flashattn
