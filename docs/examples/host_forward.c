// SPDX-License-Identifier: BSD-3-Clause
/* A complete libflashattn program: causal grouped-query attention on the HOST backend, checked against attention
 * computed here in double precision.
 *
 *   cc -std=c99 host_forward.c $(pkg-config --cflags --libs flashattn) -lm && ./a.out
 *
 * Q and O are [batch 2, 8 heads, 5 queries, 16] and K, V [2, 2 KV heads, 7 keys, 16], all stored BSHD (tokens
 * outside, heads inside) in FP32; descriptor dimensions are always [batch, heads, seq, headDim] and the strides say
 * where the elements lie. The mask is causal, aligned bottom-right: query i sees keys j <= i + (7 - 5). On a CUDA
 * handle the same calls take device pointers and run on the handle's stream. */
#include <flashattn/flashattn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 2, H = 8, HK = 2, SQ = 5, SK = 7, D = 16 };

/* Stops with the library's own explanation of the failure. */
static void check(flashAttnStatus_t status, const char *call) {
  char message[512];
  if (status == FLASHATTN_STATUS_SUCCESS) return;
  flashAttnGetLastErrorMessage(message, sizeof message);
  fprintf(stderr, "%s: %s: %s\n", call, flashAttnGetErrorString(status), message);
  exit(1);
}

static float q[B][SQ][H][D], o[B][SQ][H][D], lse[B][H][SQ];
static float k[B][SK][HK][D], v[B][SK][HK][D];

int main(void) {
  const int64_t qDims[4] = {B, H, SQ, D}, qStrides[4] = {SQ * H * D, D, H * D, 1};
  const int64_t kDims[4] = {B, HK, SK, D}, kStrides[4] = {SK * HK * D, D, HK * D, 1};
  const int64_t lseDims[3] = {B, H, SQ}, lseStrides[3] = {H * SQ, SQ, 1};
  flashAttnHandle_t handle;
  flashAttnTensorDescriptor_t qDesc, kDesc, vDesc, oDesc, lseDesc;
  flashAttnAttentionDescriptor_t attn;
  char kernel[256];
  size_t workspaceBytes = 0;
  void *block = NULL, *workspace = NULL;
  double worstO = 0.0, worstLse = 0.0;
  int b, h, i, j, d, failed = 0;

  for (b = 0; b < B; ++b)
    for (i = 0; i < SQ; ++i)
      for (h = 0; h < H; ++h)
        for (d = 0; d < D; ++d) q[b][i][h][d] = (float)sin(1.0 + b + 0.3 * i + 0.7 * h + 0.11 * d);
  for (b = 0; b < B; ++b)
    for (j = 0; j < SK; ++j)
      for (h = 0; h < HK; ++h)
        for (d = 0; d < D; ++d) {
          k[b][j][h][d] = (float)cos(0.5 * b + 0.2 * j + 0.9 * h + 0.13 * d);
          v[b][j][h][d] = (float)sin(0.4 * b - 0.6 * j + 1.7 * h + 0.05 * d);
        }

  check(flashAttnCreateWithBackend(&handle, FLASHATTN_BACKEND_HOST), "flashAttnCreateWithBackend");
  check(flashAttnCreateTensorDescriptor(&qDesc), "flashAttnCreateTensorDescriptor");
  check(flashAttnCreateTensorDescriptor(&kDesc), "flashAttnCreateTensorDescriptor");
  check(flashAttnCreateTensorDescriptor(&vDesc), "flashAttnCreateTensorDescriptor");
  check(flashAttnCreateTensorDescriptor(&oDesc), "flashAttnCreateTensorDescriptor");
  check(flashAttnCreateTensorDescriptor(&lseDesc), "flashAttnCreateTensorDescriptor");
  check(flashAttnSetTensorDescriptor(qDesc, FLASHATTN_DATA_FP32, 4, qDims, qStrides), "Q descriptor");
  check(flashAttnSetTensorDescriptor(kDesc, FLASHATTN_DATA_FP32, 4, kDims, kStrides), "K descriptor");
  check(flashAttnSetTensorDescriptor(vDesc, FLASHATTN_DATA_FP32, 4, kDims, kStrides), "V descriptor");
  check(flashAttnSetTensorDescriptor(oDesc, FLASHATTN_DATA_FP32, 4, qDims, qStrides), "O descriptor");
  check(flashAttnSetTensorDescriptor(lseDesc, FLASHATTN_DATA_FP32, 3, lseDims, lseStrides), "LSE descriptor");
  check(flashAttnCreateAttentionDescriptor(&attn), "flashAttnCreateAttentionDescriptor");
  check(flashAttnSetAttentionMask(attn, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT), "flashAttnSetAttentionMask");

  check(flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, attn, NULL, qDesc, kDesc, vDesc, oDesc, kernel,
                              sizeof kernel, NULL),
        "flashAttnCheckSupport");
  printf("forward runs on: %s\n", kernel);

  /* The workspace must be 256-byte aligned; C99 has no aligned_alloc, so round a larger block up. */
  check(flashAttnForwardGetWorkspaceSize(handle, attn, NULL, qDesc, kDesc, vDesc, oDesc, lseDesc, &workspaceBytes),
        "flashAttnForwardGetWorkspaceSize");
  if (workspaceBytes > 0) {
    block = malloc(workspaceBytes + 255);
    if (block == NULL) return 1;
    workspace = (void *)(((uintptr_t)block + 255) & ~(uintptr_t)255);
  }
  check(flashAttnForward(handle, attn, NULL, qDesc, q, kDesc, k, vDesc, v, oDesc, o, lseDesc, &lse[0][0][0],
                         workspace, workspaceBytes),
        "flashAttnForward");

  /* The same attention in double precision: scale 1/sqrt(D), query head h reads KV head h / (H / HK). */
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (i = 0; i < SQ; ++i) {
        const int kvh = h / (H / HK), visible = i + (SK - SQ) + 1;
        double logit[SK], top = -INFINITY, sum = 0.0, rowLse;
        for (j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (d = 0; d < D; ++d) dot += (double)q[b][i][h][d] * k[b][j][kvh][d];
          logit[j] = dot / sqrt((double)D);
          if (logit[j] > top) top = logit[j];
        }
        for (j = 0; j < visible; ++j) sum += exp(logit[j] - top);
        rowLse = top + log(sum);
        if (!(fabs(lse[b][h][i] - rowLse) <= worstLse)) worstLse = fabs(lse[b][h][i] - rowLse);
        for (d = 0; d < D; ++d) {
          double ref = 0.0;
          for (j = 0; j < visible; ++j) ref += exp(logit[j] - rowLse) * v[b][j][kvh][d];
          /* written so that a NaN output also counts as a failure */
          if (!(fabs(o[b][i][h][d] - ref) <= worstO)) worstO = fabs(o[b][i][h][d] - ref);
          if (!(fabs(o[b][i][h][d] - ref) <= 1e-5)) failed = 1;
        }
        if (!(fabs(lse[b][h][i] - rowLse) <= 1e-5)) failed = 1;
      }

  printf("max |O - reference| = %.3g, max |LSE - reference| = %.3g: %s\n", worstO, worstLse,
         failed ? "WRONG" : "agrees with the float64 reference");
  flashAttnDestroyTensorDescriptor(qDesc);
  flashAttnDestroyTensorDescriptor(kDesc);
  flashAttnDestroyTensorDescriptor(vDesc);
  flashAttnDestroyTensorDescriptor(oDesc);
  flashAttnDestroyTensorDescriptor(lseDesc);
  flashAttnDestroyAttentionDescriptor(attn);
  flashAttnDestroy(handle);
  free(block);
  return failed;
}
