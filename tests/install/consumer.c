// SPDX-License-Identifier: BSD-3-Clause
/* A consumer of the installed library, built once through pkg-config and once through find_package(FlashAttn).
 * It sees only what an installation ships (header, version header, .so), so a missing or misplaced file fails here.
 * It checks that the header it was compiled against matches the library it loaded, and that a small GQA forward on
 * the HOST backend agrees with attention written out below. */
#include <flashattn/flashattn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 2, HEADS = 4, KV_HEADS = 2, SEQ_Q = 3, SEQ_K = 5, HEAD_DIM = 8 };

static int fail(const char *what, flashAttnStatus_t status) {
  char message[512];
  flashAttnGetLastErrorMessage(message, sizeof message);
  fprintf(stderr, "consumer: %s failed: %s (%s)\n", what, flashAttnGetErrorString(status), message);
  return 1;
}

static flashAttnStatus_t describe(flashAttnTensorDescriptor_t *desc, int32_t rank, const int64_t *dims) {
  int64_t strides[4];
  int32_t i;
  flashAttnStatus_t status = flashAttnCreateTensorDescriptor(desc);
  if (status != FLASHATTN_STATUS_SUCCESS) return status;
  strides[rank - 1] = 1;
  for (i = rank - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return flashAttnSetTensorDescriptor(*desc, FLASHATTN_DATA_FP32, rank, dims, strides);
}

/* The header's workspace contract: 256-byte aligned. C99 has no aligned_alloc, so a block 255 bytes longer is
 * allocated and the pointer rounded up; *block keeps what free() needs. */
static void *alignedWorkspace(size_t bytes, void **block) {
  uintptr_t at;
  *block = malloc(bytes + 255);
  if (*block == NULL) return NULL;
  at = ((uintptr_t)*block + 255) & ~(uintptr_t)255;
  return (void *)at;
}

/* Deterministic values in [-1, 1) that differ per element and per tensor. */
static float pattern(int tensor, int index) { return (float)sin(0.7 * index + 1.3 * tensor); }

int main(void) {
  static float q[BATCH][HEADS][SEQ_Q][HEAD_DIM], o[BATCH][HEADS][SEQ_Q][HEAD_DIM], lse[BATCH][HEADS][SEQ_Q];
  static float k[BATCH][KV_HEADS][SEQ_K][HEAD_DIM], v[BATCH][KV_HEADS][SEQ_K][HEAD_DIM];
  const int64_t qDims[4] = {BATCH, HEADS, SEQ_Q, HEAD_DIM};
  const int64_t kvDims[4] = {BATCH, KV_HEADS, SEQ_K, HEAD_DIM};
  const int64_t lseDims[3] = {BATCH, HEADS, SEQ_Q};
  flashAttnHandle_t handle = NULL;
  flashAttnBackend_t backend;
  flashAttnTensorDescriptor_t qDesc = NULL, kDesc = NULL, vDesc = NULL, oDesc = NULL, lseDesc = NULL;
  flashAttnStatus_t status;
  size_t workspaceBytes = 0;
  void *workspace = NULL, *workspaceBlock = NULL;
  /* FP32 storage with FP32 accumulation over 8-element dot products and 5 keys. */
  const double tolerance = 1e-5;
  double maxError = 0.0, maxLseError = 0.0;
  int outOfTolerance = 0; /* also set by NaN, which no max would keep */
  int b, h, i, j, d;

  if (flashAttnGetVersion() != FLASHATTN_VERSION) {
    fprintf(stderr, "consumer: header version %d, library version %d\n", FLASHATTN_VERSION, (int)flashAttnGetVersion());
    return 1;
  }

  for (i = 0; i < BATCH * HEADS * SEQ_Q * HEAD_DIM; ++i) (&q[0][0][0][0])[i] = pattern(0, i);
  for (i = 0; i < BATCH * KV_HEADS * SEQ_K * HEAD_DIM; ++i) {
    (&k[0][0][0][0])[i] = pattern(1, i);
    (&v[0][0][0][0])[i] = pattern(2, i);
  }

  status = flashAttnCreateWithBackend(&handle, FLASHATTN_BACKEND_HOST);
  if (status != FLASHATTN_STATUS_SUCCESS) return fail("flashAttnCreateWithBackend(HOST)", status);
  status = flashAttnGetBackend(handle, &backend);
  if (status != FLASHATTN_STATUS_SUCCESS) return fail("flashAttnGetBackend", status);
  if (backend != FLASHATTN_BACKEND_HOST) {
    fprintf(stderr, "consumer: asked for the HOST backend, got %d\n", (int)backend);
    return 1;
  }
  if ((status = describe(&qDesc, 4, qDims)) != FLASHATTN_STATUS_SUCCESS ||
      (status = describe(&kDesc, 4, kvDims)) != FLASHATTN_STATUS_SUCCESS ||
      (status = describe(&vDesc, 4, kvDims)) != FLASHATTN_STATUS_SUCCESS ||
      (status = describe(&oDesc, 4, qDims)) != FLASHATTN_STATUS_SUCCESS ||
      (status = describe(&lseDesc, 3, lseDims)) != FLASHATTN_STATUS_SUCCESS)
    return fail("tensor descriptor", status);

  status = flashAttnForwardGetWorkspaceSize(handle, NULL, NULL, qDesc, kDesc, vDesc, oDesc, lseDesc, &workspaceBytes);
  if (status != FLASHATTN_STATUS_SUCCESS) return fail("flashAttnForwardGetWorkspaceSize", status);
  if (workspaceBytes > 0 && (workspace = alignedWorkspace(workspaceBytes, &workspaceBlock)) == NULL) return 1;
  status = flashAttnForward(handle, NULL, NULL, qDesc, q, kDesc, k, vDesc, v, oDesc, o, lseDesc, &lse[0][0][0],
                            workspace, workspaceBytes);
  if (status != FLASHATTN_STATUS_SUCCESS) return fail("flashAttnForward", status);

  /* Default scale 1/sqrt(headDim), no mask; query head h reads KV head h / (HEADS / KV_HEADS). */
  for (b = 0; b < BATCH; ++b)
    for (h = 0; h < HEADS; ++h)
      for (i = 0; i < SEQ_Q; ++i) {
        const int kvh = h / (HEADS / KV_HEADS);
        double logits[SEQ_K], maxLogit = -INFINITY, sum = 0.0, lseRef;
        for (j = 0; j < SEQ_K; ++j) {
          double dot = 0.0;
          for (d = 0; d < HEAD_DIM; ++d) dot += (double)q[b][h][i][d] * k[b][kvh][j][d];
          logits[j] = dot / sqrt((double)HEAD_DIM);
          if (logits[j] > maxLogit) maxLogit = logits[j];
        }
        for (j = 0; j < SEQ_K; ++j) sum += exp(logits[j] - maxLogit);
        lseRef = maxLogit + log(sum);
        if (!(fabs(lse[b][h][i] - lseRef) <= tolerance)) outOfTolerance = 1;
        if (fabs(lse[b][h][i] - lseRef) > maxLseError) maxLseError = fabs(lse[b][h][i] - lseRef);
        for (d = 0; d < HEAD_DIM; ++d) {
          double ref = 0.0;
          for (j = 0; j < SEQ_K; ++j) ref += exp(logits[j] - lseRef) * v[b][kvh][j][d];
          if (!(fabs(o[b][h][i][d] - ref) <= tolerance)) outOfTolerance = 1;
          if (fabs(o[b][h][i][d] - ref) > maxError) maxError = fabs(o[b][h][i][d] - ref);
        }
      }

  flashAttnDestroyTensorDescriptor(qDesc);
  flashAttnDestroyTensorDescriptor(kDesc);
  flashAttnDestroyTensorDescriptor(vDesc);
  flashAttnDestroyTensorDescriptor(oDesc);
  flashAttnDestroyTensorDescriptor(lseDesc);
  flashAttnDestroy(handle);
  free(workspaceBlock);

  printf("consumer: libflashattn %d, forward max |O error| %.3g, max |LSE error| %.3g\n", (int)flashAttnGetVersion(),
         maxError, maxLseError);
  if (outOfTolerance) {
    fprintf(stderr, "consumer: forward disagrees with the reference\n");
    return 1;
  }
  return 0;
}
