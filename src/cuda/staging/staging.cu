// SPDX-License-Identifier: BSD-3-Clause
// stageIn/stageOut: one grid-stride kernel copies every staged tensor of a call between the caller's strides and the
// packed slots of the workspace (staging.hpp).
#include "cuda/staging/staging.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace flashattn::cuda {

namespace {

// One tensor of a launch. Strides are in elements; rows are numbered [batch][heads][rows] across the launch.
struct CopyItem {
  const unsigned char *src;
  unsigned char *dst;
  int64_t srcBatch, srcHead, srcRow;
  int64_t dstBatch, dstHead, dstRow;
  int64_t heads, rows;
  int64_t firstRow, endRow;  // this item's rows in the launch's numbering
  int64_t cols;              // elements read from a source row
  int64_t dstCols;           // elements written to a destination row: cols, then zeros
  const int32_t *rowLimit;   // see StagedTensor::rowLimit
};

struct CopyParams {
  CopyItem item[kStagedCount];
  int32_t count;
  int64_t totalRows;
};

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
// Enough resident warps to keep every SM's load queue busy on today's largest parts (132 SMs x 64 warps) without a
// device query per call; larger problems take more turns of the grid-stride loop.
constexpr int64_t kMaxBlocks = 2048;
// Columns a lane loads before it stores: independent loads in flight per lane, 256 columns per warp per pass.
constexpr int kColumnsPerLane = 8;

// A warp per row: lanes take consecutive columns, so a row's loads and stores are coalesced whatever the strides.
// Word is an unsigned integer of the element size: the copy is bitwise (NaN payloads included) and only needs
// element alignment. The row index is 64-bit; a row's item is found by a forward scan (a warp's rows only grow).
template <typename Word>
__global__ void __launch_bounds__(kThreads) stagingCopyKernel(const __grid_constant__ CopyParams params) {
  const int lane = int(threadIdx.x % 32);
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  int index = 0;
  for (int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; row < params.totalRows; row += warps) {
    while (index + 1 < params.count && row >= params.item[index].endRow) ++index;
    const CopyItem &it = params.item[index];
    int64_t rest = row - it.firstRow;
    const int64_t r = rest % it.rows;
    rest /= it.rows;
    const int64_t h = rest % it.heads;
    const int64_t b = rest / it.heads;
    if (it.rowLimit != nullptr) {
      const int64_t limit = int64_t(it.rowLimit[b]);
      if (r >= (limit < 0 ? 0 : limit)) continue;  // r < rows already: the upper clamp is implied
    }
    const Word *src = reinterpret_cast<const Word *>(it.src) + (b * it.srcBatch + h * it.srcHead + r * it.srcRow);
    Word *dst = reinterpret_cast<Word *>(it.dst) + (b * it.dstBatch + h * it.dstHead + r * it.dstRow);
    for (int64_t base = 0; base < it.dstCols; base += 32 * kColumnsPerLane) {
      Word v[kColumnsPerLane];
#pragma unroll
      for (int i = 0; i < kColumnsPerLane; ++i) {
        const int64_t c = base + i * 32 + lane;
        v[i] = c < it.cols ? src[c] : Word(0);
      }
#pragma unroll
      for (int i = 0; i < kColumnsPerLane; ++i) {
        const int64_t c = base + i * 32 + lane;
        if (c < it.dstCols) dst[c] = v[i];
      }
    }
  }
}

void setPointer(AttnBuffers *b, Staged t, void *ptr) {
  switch (t) {
    case Staged::Q: b->q = ptr; break;
    case Staged::K: b->k = ptr; break;
    case Staged::V: b->v = ptr; break;
    case Staged::O: b->o = ptr; break;
    case Staged::dO: b->dO = ptr; break;
    case Staged::dQ: b->dQ = ptr; break;
    case Staged::dK: b->dK = ptr; break;
    case Staged::dV: b->dV = ptr; break;
  }
}

// Appends one tensor's copy; `toSlot` copies caller -> slot (zero-filling the pitch), else slot -> caller.
void addItem(CopyParams *cp, const StagedTensor &st, void *user, void *slot, bool toSlot) {
  CopyItem &it = cp->item[cp->count++];
  const Layout &from = toSlot ? st.user : st.packed;
  const Layout &to = toSlot ? st.packed : st.user;
  it.src = static_cast<const unsigned char *>(toSlot ? user : slot);
  it.dst = static_cast<unsigned char *>(toSlot ? slot : user);
  it.srcBatch = from.batch;
  it.srcHead = from.head;
  it.srcRow = from.row;
  it.dstBatch = to.batch;
  it.dstHead = to.head;
  it.dstRow = to.row;
  it.heads = st.heads;
  it.rows = st.rows;
  it.firstRow = cp->totalRows;
  cp->totalRows += st.batch * st.heads * st.rows;
  it.endRow = cp->totalRows;
  it.cols = st.headDim;
  it.dstCols = toSlot ? st.pitch : st.headDim;
  it.rowLimit = st.rowLimit;
}

cudaError_t launch(const CopyParams &cp, int64_t elementBytes, cudaStream_t stream) {
  if (cp.totalRows == 0) return cudaSuccess;
  const int64_t wanted = (cp.totalRows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const unsigned blocks = unsigned(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  if (elementBytes == 4)
    stagingCopyKernel<uint32_t><<<blocks, kThreads, 0, stream>>>(cp);
  else
    stagingCopyKernel<uint16_t><<<blocks, kThreads, 0, stream>>>(cp);
  return cudaGetLastError();
}

// The plan must describe this problem: its caller-side layouts are the ones the copy walks.
bool planMatches(const StagingPlan &s, const AttnProblem &p) {
  if (s.elementBytes != int64_t(dtypeSize(p.dtype))) return false;
  for (int i = 0; i < kStagedCount; ++i)
    if (s.tensor[i].reserved && !(s.tensor[i].user == stagedLayout(p, Staged(i)))) return false;
  return true;
}

}  // namespace

cudaError_t stageIn(const StagingPlan &s, const AttnProblem &p, const AttnBuffers &user, void *stagingWorkspace,
                    AttnBuffers *kernelBuffers, cudaStream_t stream) {
  if (kernelBuffers == nullptr || !planMatches(s, p)) return cudaErrorInvalidValue;
  *kernelBuffers = user;
  CopyParams cp{};
  for (int i = 0; i < kStagedCount; ++i) {
    const Staged t = Staged(i);
    if (!stagedInCall(s, t, user)) continue;
    if (stagingWorkspace == nullptr) return cudaErrorInvalidValue;
    const StagedTensor &st = s.tensor[i];
    void *slot = static_cast<unsigned char *>(stagingWorkspace) + st.offset;
    setPointer(kernelBuffers, t, slot);
    if (!st.output) addItem(&cp, st, const_cast<void *>(stagedPointer(user, t)), slot, true);
  }
  return launch(cp, s.elementBytes, stream);
}

cudaError_t stageOut(const StagingPlan &s, const AttnProblem &p, const AttnBuffers &user, void *stagingWorkspace,
                     cudaStream_t stream) {
  if (!planMatches(s, p)) return cudaErrorInvalidValue;
  CopyParams cp{};
  for (int i = 0; i < kStagedCount; ++i) {
    const Staged t = Staged(i);
    const StagedTensor &st = s.tensor[i];
    if (!st.output || !stagedInCall(s, t, user)) continue;
    if (stagingWorkspace == nullptr) return cudaErrorInvalidValue;
    addItem(&cp, st, const_cast<void *>(stagedPointer(user, t)), static_cast<unsigned char *>(stagingWorkspace) + st.offset, false);
  }
  return launch(cp, s.elementBytes, stream);
}

}  // namespace flashattn::cuda
