// SPDX-License-Identifier: BSD-3-Clause
// Staging copies: how the CUDA backward and decode serve tensors their kernels cannot load.
//
// Why. Those kernels move rows in 16-byte vectors (cp.async, TMA), so a tensor whose walked batch, head or row stride
// is not a multiple of 16 bytes (an odd-sized slice of a larger buffer, say dO with batch stride 2819 elements), or
// whose base pointer is not 16-byte aligned, cannot be read or written by them. Rather than refuse such a call, the
// backend copies the tensor through the workspace: stageIn copies every staged input into a packed layout (rows of
// headDim rounded up to 16 bytes, [batch][heads][rows] dense, [tokens][heads] ragged, [page][row][head] for a paged
// pool) and points the kernels at it; the kernels write staged outputs into packed slots; stageOut copies those to the
// caller's strides. Each is one kernel launch of element-wise loads and stores in the storage type, so any stride
// and any element-aligned pointer works. Nothing is allocated and nothing synchronises: graph capture works.
//
// What it costs. Only tensors that need it are copied; a call with aligned tensors runs as before and needs no extra
// workspace. A staged tensor costs one extra read and one extra write of its bytes (inputs before the kernels, outputs
// after them) and its packed size in workspace, rounded up to 256 bytes (StagingPlan::totalBytes, which the planner
// adds in front of the kernels' own workspace). Input rows the kernels never read are not copied (keys past seqlensK,
// ragged tokens past cuSeqlens[batch]); a broadcast input dimension (stride 0) is copied once.
//
// Sizing. Strides are in the problem, so their staging is decided by planStaging and sized by the workspace query.
// Two things are not in the problem and need the `room` argument of planStaging:
// - base pointers: the query cannot know them. Room for every candidate (kAllStagedRoom) costs the packed size of
//   all of the operation's tensors (about the size of its inputs and outputs together) in every workspace; room for
//   none keeps the run-time refusal of unaligned pointers. Frameworks allocate 16-byte aligned tensors, so room for
//   pointers belongs behind an explicit request, not in the default size.
// - backward's gradients: its size query takes no dO/dQ/dK/dV descriptors and plans them in the layouts of O/Q/K/V.
//   Room for them (kGradientRoom) makes the query's size cover any gradient strides (slot sizes depend on shapes
//   only), at the cost of the four gradients' packed size in every backward workspace; without it a call whose
//   gradient strides need staging asks for more workspace than the query returned.
// - paged caches: staging copies the whole page pool, used or not (wholePool), so a decode step pays a copy of the
//   pool. A copy sized by the used pages would gather them through the block table into a dense
//   [batch][kvHeads][maxPagesPerSeq * pageSize] cache (reading the block table on the device, with seqlensK as the
//   row limit) and hand the kernels a dense problem; that is not implemented here.
#pragma once

#include <cuda_runtime.h>

#include "core/problem.hpp"
#include "cuda/staging/staging_plan.hpp"

namespace flashattn::cuda {

// Copies every input staged in this call (stagedInCall) from the caller's buffers into its slot of
// `stagingWorkspace` (StagingPlan::totalBytes, 256-byte aligned) with one launch on `stream` (none when no input is
// staged), and fills *kernelBuffers: the caller's pointers with every staged tensor's, outputs included, replaced by
// its slot. The kernels then run on restage(p, s, user) and *kernelBuffers. `s` must be planStaging of `p`
// (cudaErrorInvalidValue otherwise, or when something is staged and the workspace is NULL).
cudaError_t stageIn(const StagingPlan &s, const AttnProblem &p, const AttnBuffers &user, void *stagingWorkspace,
                    AttnBuffers *kernelBuffers, cudaStream_t stream);

// After the kernels on the same stream: copies every output staged in this call from its slot to the caller's
// buffer with one launch (none when no output is staged). Elements the copy does not address are left untouched.
cudaError_t stageOut(const StagingPlan &s, const AttnProblem &p, const AttnBuffers &user, void *stagingWorkspace,
                     cudaStream_t stream);

}  // namespace flashattn::cuda
