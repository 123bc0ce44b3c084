// SPDX-License-Identifier: BSD-3-Clause
// One plan per call: which kernel runs, its configuration, and the workspace layout. CheckSupport, the workspace-size
// query and the operation all ask the backend for the plan of the same normalized problem, so what CheckSupport says,
// the size returned and what the run does are one decision.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "core/problem.hpp"

namespace flashattn {

// Every kernel (family) that can serve an operation. Values are stable within a build only; tests and flashattn-bench
// compare them, and kernelIdName() is the first word of every plan description.
enum class KernelId : int32_t {
  None = 0,
  HostReference = 1,  // the HOST backend
  ForwardMma = 10,    // portable forward: mma.sync m16n8k16, cp.async (sm80+)
  ForwardFfma = 11,   // portable forward for FP32 storage: FFMA
  ForwardWgmma = 12,  // Hopper forward: wgmma, producer warp, setmaxnreg (sm_90a)
  BackwardMma = 20,
  BackwardFfma = 21,
  BackwardWgmma = 22,
  DecodeSplitKv = 30,  // split-KV decode with the merge in the kernel or after it
  DecodeAsForward = 31,  // DecodeChunk past the split-KV kernels' query tokens: a forward family's plan, run as is
  DecodeWgmma = 32,      // Hopper split-KV decode of 64-row tiles (wgmma): absorbed MLA (576/512), many rows per KV head
  MergeStates = 40,
};

const char *kernelIdName(KernelId id);  // "cuda.fwd.mma_sync", ...

// A compiled kernel instance: storage type and the head dim it was compiled for (>= the problem's; columns between
// are zero-filled); headDimV, the V/O head dim of an instance compiled for one apart from Q/K's (0: the same).
struct InstanceKey {
  DType dtype = DType::FP16;
  int32_t headDim = 0;
  int32_t headDimV = 0;
  constexpr int32_t widthV() const { return headDimV > 0 ? headDimV : headDim; }
};

struct ForwardConfig {
  InstanceKey instance;
  int32_t blockM = 0, blockN = 0, warps = 0;
  bool persistent = false;  // wgmma: CTAs loop over tiles
  bool tma = false;         // wgmma: Q, K and V by tensor-map copies
  bool shortTile = false;   // wgmma: the instance's tile for short sequences (forward_sm90_params.hpp shortTileFor)
  int32_t qkWidth = 0;      // wgmma: the columns S = Q K^T contracts over (0: the instance's; trimmedQKWidth)
  KernelId forwardFamily = KernelId::None;  // a DecodeAsForward plan: the forward family that runs it
};

struct BackwardConfig {
  InstanceKey instance;
  int32_t blockM = 0, blockN = 0, warps = 0, ctasPerSM = 1;
  int32_t tileIndex = 0;  // mma_sync: the entry of the instance's tile list
  bool dqPaneled = false;  // the FP32 dQ accumulator in 64-column panels (backward_params.hpp: dqAccumIndex)
  bool tma = false;        // wgmma: Q and dO by tensor-map copies from a producer warpgroup
  // dS without the softmax scale (one multiply an element fewer in the main loop): dK takes it once at its store,
  // dQ in the convert kernel (BackwardParams::dqScale)
  bool dsUnscaled = false;
  // The main kernel's CTA order: sections of this many (sequence, KV head) groups, key-block-major inside
  // (BackwardParams::groupsPerSection)
  int32_t groupsPerSection = 1;
  // Deterministic mode: dQ additions into a query block ordered by descending key block, the grid launching key
  // blocks in descending order (BackwardParams::descendingTurns), where the mask has no left window and bounds the
  // query rows from below
  bool descendingTurns = false;
};

struct DecodeConfig {
  InstanceKey instance;
  int32_t warps = 4, tileKeys = 0, stages = 3, loader = 0;
  int32_t merge = 0;              // decode::MergeMode
  int32_t rowTileCap = 0;         // row tiles per CTA at most (0: the loader's own limit)
  bool clusterWhereFits = false;  // the cluster merge where it pays and every unit's cluster is resident
  bool clusterWherever = false;   // with clusterWhereFits: wherever it fits, paying or not (FLASHATTN_DECODE_MERGE)
};

struct MergeConfig {};

using FamilyConfig = std::variant<std::monostate, ForwardConfig, BackwardConfig, DecodeConfig, MergeConfig>;

// A named sub-buffer of the caller's workspace.
struct WorkspaceRegion {
  const char *name = nullptr;  // nullptr: unused slot
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

struct Plan {
  KernelId kernel = KernelId::None;
  FamilyConfig config;
  std::string description;  // "cuda.fwd.mma_sync sm90 bf16 d128 tile 128x64 4 warps; fp32 accumulate; ..."
  bool deterministic = true;
  std::size_t workspaceBytes = 0;
  // Indexed by the family's own region enum (e.g. backward's kRowDot...); a family never reads another's regions.
  std::array<WorkspaceRegion, 6> regions{};
  // The CUDA backend's staging slots (src/cuda/staging) lie first; the family's regions follow them.
  std::size_t stagingBytes = 0;
  int32_t numChunks = 0;  // decode: the chunk count decided

  template <typename Config>
  const Config &as() const {
    return std::get<Config>(config);
  }
  // Appends a region at the next 256-byte boundary after the previous ones; returns its offset.
  std::size_t addRegion(int index, const char *name, std::size_t bytes);
  void *regionPointer(int index, void *workspace) const {
    return regions[std::size_t(index)].bytes == 0 ? nullptr
                                                  : static_cast<unsigned char *>(workspace) +
                                                        regions[std::size_t(index)].offset;
  }
};

// Workspace sub-buffers start at multiples of this (the caller's workspace is 256-byte aligned).
constexpr std::size_t kWorkspaceAlignment = 256;
inline std::size_t alignWorkspace(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

inline std::size_t Plan::addRegion(int index, const char *name, std::size_t bytes) {
  const std::size_t offset = alignWorkspace(workspaceBytes);
  regions[std::size_t(index)] = WorkspaceRegion{name, offset, bytes};
  workspaceBytes = offset + alignWorkspace(bytes);
  return offset;
}

inline const char *kernelIdName(KernelId id) {
  switch (id) {
    case KernelId::None: return "none";
    case KernelId::HostReference: return "host.reference";
    case KernelId::ForwardMma: return "cuda.fwd.mma_sync";
    case KernelId::ForwardFfma: return "cuda.fwd.ffma";
    case KernelId::ForwardWgmma: return "cuda.fwd.wgmma";
    case KernelId::BackwardMma: return "cuda.bwd.mma_sync";
    case KernelId::BackwardFfma: return "cuda.bwd.ffma";
    case KernelId::BackwardWgmma: return "cuda.bwd.wgmma";
    case KernelId::DecodeSplitKv: return "cuda.decode";
    case KernelId::DecodeAsForward: return "cuda.decode.forward";
    case KernelId::DecodeWgmma: return "cuda.decode.wgmma";
    case KernelId::MergeStates: return "cuda.merge";
  }
  return "unknown";
}

}  // namespace flashattn
