// SPDX-License-Identifier: BSD-3-Clause
/*
 * A C99 program using libflashattn the way a C user would: only the public header, no CUDA header, the HOST backend,
 * results checked against a naive attention written here in double. Reports every failed check and exits non-zero
 * if there was any.
 */
#include <flashattn/flashattn.h> /* first, so this translation unit also proves the header needs nothing before it */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined in header_only_c99.c, a translation unit that includes nothing but the public header. */
int32_t headerOnlyTranslationUnitVersion(void);

static int failureCount = 0;

#define CHECK(condition, ...)                                                         \
  do {                                                                                \
    if (!(condition)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #condition); \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fputc('\n', stderr);                                                            \
      ++failureCount;                                                                 \
    }                                                                                 \
  } while (0)

static const char *lastMessage(void) {
  static char buffer[1024];
  flashAttnGetLastErrorMessage(buffer, sizeof buffer);
  return buffer;
}

/* Evaluates a call once; on a status other than `expected` reports both statuses and the library's message. */
#define CHECK_STATUS(call, expected)                                                                              \
  do {                                                                                                            \
    const flashAttnStatus_t got_ = (call);                                                                        \
    CHECK(got_ == (expected), "%s returned %s, expected %s (last error: %s)", #call, flashAttnGetErrorString(got_), \
          flashAttnGetErrorString(expected), lastMessage());                                                      \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, FLASHATTN_STATUS_SUCCESS)

/* ------------------------------------------------------------------------------------------------------------- */
/* Random numbers, BF16 storage and strided tensors                                                               */

static uint64_t rngState = 0x9E3779B97F4A7C15ull;

/* Uniform in [-1, 1): xorshift64*, so the run is the same on every platform. */
static double randomUniform(void) {
  rngState ^= rngState >> 12;
  rngState ^= rngState << 25;
  rngState ^= rngState >> 27;
  const uint64_t bits = (rngState * 0x2545F4914F6CDD1Dull) >> 11;
  return (double)bits / 4503599627370496.0 - 1.0; /* 2^52 */
}

static uint16_t floatToBf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(bits >> 16);
}

static float bf16ToFloat(uint16_t value) {
  const uint32_t bits = (uint32_t)value << 16;
  float out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

#define MAX_RANK 5

/* A strided tensor in host memory with its descriptor. `span` counts the elements the strides reach. */
typedef struct {
  flashAttnDataType_t dtype;
  int32_t rank;
  int64_t dims[MAX_RANK];
  int64_t strides[MAX_RANK];
  int64_t span;
  void *data;
  flashAttnTensorDescriptor_t desc;
} Tensor;

static size_t elementBytes(flashAttnDataType_t dtype) { return dtype == FLASHATTN_DATA_FP32 ? 4u : 2u; }

static void tensorStore(Tensor *t, int64_t offset, double value) {
  if (t->dtype == FLASHATTN_DATA_FP32) {
    ((float *)t->data)[offset] = (float)value;
  } else {
    ((uint16_t *)t->data)[offset] = floatToBf16((float)value);
  }
}

static double tensorLoad(const Tensor *t, int64_t offset) {
  if (t->dtype == FLASHATTN_DATA_FP32) return ((const float *)t->data)[offset];
  return bf16ToFloat(((const uint16_t *)t->data)[offset]);
}

/* Every byte 0xFF: NaN in FP32 and BF16, so an element an operation should write but does not shows up. */
static void tensorPoison(Tensor *t) { memset(t->data, 0xFF, (size_t)t->span * elementBytes(t->dtype)); }

static void tensorInit(Tensor *t, flashAttnDataType_t dtype, int32_t rank, const int64_t *dims,
                       const int64_t *strides) {
  int32_t d;
  memset(t, 0, sizeof *t);
  t->dtype = dtype;
  t->rank = rank;
  t->span = 1;
  for (d = 0; d < rank; ++d) {
    t->dims[d] = dims[d];
    t->strides[d] = strides[d];
    t->span += (dims[d] - 1) * strides[d];
  }
  t->data = malloc((size_t)t->span * elementBytes(dtype));
  if (!t->data) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  tensorPoison(t);
  CHECK_OK(flashAttnCreateTensorDescriptor(&t->desc));
  CHECK_OK(flashAttnSetTensorDescriptor(t->desc, dtype, rank, t->dims, t->strides));
}

/* Contiguous row-major strides for `dims`. */
static void packedStrides(int32_t rank, const int64_t *dims, int64_t *strides) {
  int32_t d;
  int64_t stride = 1;
  for (d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= dims[d];
  }
}

static void tensorInitPacked(Tensor *t, flashAttnDataType_t dtype, int32_t rank, const int64_t *dims) {
  int64_t strides[MAX_RANK];
  packedStrides(rank, dims, strides);
  tensorInit(t, dtype, rank, dims, strides);
}

static void tensorFree(Tensor *t) {
  CHECK_OK(flashAttnDestroyTensorDescriptor(t->desc));
  free(t->data);
  t->data = NULL;
  t->desc = NULL;
}

static int64_t elementCount(int32_t rank, const int64_t *dims) {
  int64_t n = 1;
  int32_t d;
  for (d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

/* Visits the elements in canonical (row-major over dims) order, the order of the naive arrays below. */
static int64_t canonicalToOffset(const Tensor *t, int64_t canonicalIndex) {
  int64_t offset = 0;
  int32_t d;
  for (d = t->rank - 1; d >= 0; --d) {
    offset += (canonicalIndex % t->dims[d]) * t->strides[d];
    canonicalIndex /= t->dims[d];
  }
  return offset;
}

/* Writes canonical values into the strided tensor, then reads them back so `canonical` holds exactly what is stored
 * (BF16 rounding included) and the reference sees what the library reads. */
static void tensorUpload(Tensor *t, double *canonical) {
  const int64_t n = elementCount(t->rank, t->dims);
  int64_t i;
  for (i = 0; i < n; ++i) {
    tensorStore(t, canonicalToOffset(t, i), canonical[i]);
    canonical[i] = tensorLoad(t, canonicalToOffset(t, i));
  }
}

static void tensorDownload(const Tensor *t, double *canonical) {
  const int64_t n = elementCount(t->rank, t->dims);
  int64_t i;
  for (i = 0; i < n; ++i) canonical[i] = tensorLoad(t, canonicalToOffset(t, i));
}

static double *randomArray(int64_t n) {
  double *values = (double *)malloc((size_t)n * sizeof *values);
  int64_t i;
  if (!values) exit(2);
  for (i = 0; i < n; ++i) values[i] = 2.0 * randomUniform();
  return values;
}

static double *zeroArray(int64_t n) {
  double *values = (double *)calloc((size_t)n, sizeof *values);
  if (!values) exit(2);
  return values;
}

/* The library wants workspace aligned to 256 bytes; C99 has no aligned_alloc, so over-allocate and round up. */
typedef struct {
  void *raw;
  void *aligned;
  size_t bytes;
} Workspace;

static void workspaceInit(Workspace *w, size_t bytes) {
  w->bytes = bytes;
  w->raw = NULL;
  w->aligned = NULL;
  if (bytes == 0) return;
  w->raw = malloc(bytes + 256);
  if (!w->raw) exit(2);
  w->aligned = (void *)(((uintptr_t)w->raw + 255u) & ~(uintptr_t)255u);
}

static void workspaceFree(Workspace *w) { free(w->raw); }

/* ------------------------------------------------------------------------------------------------------------- */
/* Naive attention in double, canonical layouts: q[b][h][i][d], k/v[b][kvh][j][d], o[b][h][i][dv], lse[b][h][i]   */

typedef struct {
  int64_t batch, heads, kvHeads, seqQ, seqK, headDim, headDimV;
  double scale; /* already resolved */
  double softcap;
  flashAttnMaskMode_t mask;
  int64_t windowLeft, windowRight;
  const double *alibiSlopes;  /* [heads] or NULL */
  const int32_t *kvLengths;   /* [batch] used KV lengths, or NULL for seqK */
} Naive;

static int64_t naiveKvLength(const Naive *p, int64_t b) { return p->kvLengths ? p->kvLengths[b] : p->seqK; }

static int naiveVisible(const Naive *p, int64_t i, int64_t j, int64_t sk) {
  const int64_t aligned = i + sk - p->seqQ;
  if (p->mask == FLASHATTN_MASK_CAUSAL_TOP_LEFT && j > i) return 0;
  if (p->mask == FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT && j > aligned) return 0;
  if (p->windowLeft >= 0 && j < aligned - p->windowLeft) return 0;
  if (p->windowRight >= 0 && j > aligned + p->windowRight) return 0;
  return 1;
}

/* Logit of (i, j) and, for the backward, its derivative with respect to the raw dot product. */
static double naiveLogit(const Naive *p, double dot, int64_t h, int64_t i, int64_t j, int64_t sk, double *dLogit) {
  double logit = dot * p->scale;
  double derivative = p->scale;
  if (p->softcap > 0) {
    const double t = tanh(logit / p->softcap);
    logit = p->softcap * t;
    derivative *= 1.0 - t * t;
  }
  if (p->alibiSlopes) logit -= p->alibiSlopes[h] * fabs((double)(j - (i + sk - p->seqQ)));
  if (dLogit) *dLogit = derivative;
  return logit;
}

/* Probabilities of row (b, h, i) over [0, seqK) into `prob` (0 where invisible); returns the LSE (-inf if empty). */
static double naiveRow(const Naive *p, const double *q, const double *k, int64_t b, int64_t h, int64_t i,
                       double *prob) {
  const int64_t sk = naiveKvLength(p, b);
  const int64_t kvh = h / (p->heads / p->kvHeads);
  const double *qRow = q + ((b * p->heads + h) * p->seqQ + i) * p->headDim;
  double maxLogit = -INFINITY, sum = 0.0;
  int64_t j, d;
  for (j = 0; j < p->seqK; ++j) {
    prob[j] = -INFINITY;
    if (j >= sk || !naiveVisible(p, i, j, sk)) continue;
    {
      const double *kRow = k + ((b * p->kvHeads + kvh) * p->seqK + j) * p->headDim;
      double dot = 0.0;
      for (d = 0; d < p->headDim; ++d) dot += qRow[d] * kRow[d];
      prob[j] = naiveLogit(p, dot, h, i, j, sk, NULL);
      if (prob[j] > maxLogit) maxLogit = prob[j];
    }
  }
  if (maxLogit == -INFINITY) {
    for (j = 0; j < p->seqK; ++j) prob[j] = 0.0;
    return -INFINITY;
  }
  for (j = 0; j < p->seqK; ++j) {
    prob[j] = prob[j] == -INFINITY ? 0.0 : exp(prob[j] - maxLogit);
    sum += prob[j];
  }
  for (j = 0; j < p->seqK; ++j) prob[j] /= sum;
  return maxLogit + log(sum);
}

static void naiveForward(const Naive *p, const double *q, const double *k, const double *v, double *o, double *lse) {
  double *prob = zeroArray(p->seqK);
  int64_t b, h, i, j, d;
  for (b = 0; b < p->batch; ++b)
    for (h = 0; h < p->heads; ++h)
      for (i = 0; i < p->seqQ; ++i) {
        const int64_t kvh = h / (p->heads / p->kvHeads);
        const int64_t row = (b * p->heads + h) * p->seqQ + i;
        lse[row] = naiveRow(p, q, k, b, h, i, prob);
        for (d = 0; d < p->headDimV; ++d) {
          double acc = 0.0;
          for (j = 0; j < p->seqK; ++j) acc += prob[j] * v[((b * p->kvHeads + kvh) * p->seqK + j) * p->headDimV + d];
          o[row * p->headDimV + d] = acc;
        }
      }
  free(prob);
}

/* Gradients of sum(O * dO): dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO * O)), dQ = dS K, dK = dS^T Q, each
 * dS scaled by d(logit)/d(dot); KV gradients of a shared head sum over its query heads. */
static void naiveBackward(const Naive *p, const double *q, const double *k, const double *v, const double *dO,
                          double *dQ, double *dK, double *dV) {
  const int64_t group = p->heads / p->kvHeads;
  double *prob = zeroArray(p->seqK);
  int64_t b, h, i, j, d;
  memset(dQ, 0, (size_t)(p->batch * p->heads * p->seqQ * p->headDim) * sizeof *dQ);
  memset(dK, 0, (size_t)(p->batch * p->kvHeads * p->seqK * p->headDim) * sizeof *dK);
  memset(dV, 0, (size_t)(p->batch * p->kvHeads * p->seqK * p->headDimV) * sizeof *dV);
  for (b = 0; b < p->batch; ++b)
    for (h = 0; h < p->heads; ++h)
      for (i = 0; i < p->seqQ; ++i) {
        const int64_t kvh = h / group;
        const int64_t sk = naiveKvLength(p, b);
        const int64_t row = (b * p->heads + h) * p->seqQ + i;
        const double *dORow = dO + row * p->headDimV;
        const double *qRow = q + row * p->headDim;
        double rowDot = 0.0; /* sum_d dO * O = sum_j P dP */
        if (naiveRow(p, q, k, b, h, i, prob) == -INFINITY) continue;
        for (j = 0; j < p->seqK; ++j) {
          const double *vRow = v + ((b * p->kvHeads + kvh) * p->seqK + j) * p->headDimV;
          double dP = 0.0;
          for (d = 0; d < p->headDimV; ++d) dP += dORow[d] * vRow[d];
          rowDot += prob[j] * dP;
        }
        for (j = 0; j < p->seqK; ++j) {
          const int64_t kvRow = (b * p->kvHeads + kvh) * p->seqK + j;
          const double *vRow = v + kvRow * p->headDimV;
          const double *kRow = k + kvRow * p->headDim;
          double dP = 0.0, dot = 0.0, dLogit = 0.0, dS;
          if (prob[j] == 0.0) continue;
          for (d = 0; d < p->headDimV; ++d) {
            dP += dORow[d] * vRow[d];
            dV[kvRow * p->headDimV + d] += prob[j] * dORow[d];
          }
          for (d = 0; d < p->headDim; ++d) dot += qRow[d] * kRow[d];
          naiveLogit(p, dot, h, i, j, sk, &dLogit);
          dS = prob[j] * (dP - rowDot) * dLogit;
          for (d = 0; d < p->headDim; ++d) {
            dQ[row * p->headDim + d] += dS * kRow[d];
            dK[kvRow * p->headDim + d] += dS * qRow[d];
          }
        }
      }
  free(prob);
}

/* Largest |got - want|; an infinity must match exactly and a NaN anywhere is an infinite error. */
static double maxAbsError(const double *got, const double *want, int64_t n) {
  double worst = 0.0;
  int64_t i;
  for (i = 0; i < n; ++i) {
    double err;
    if (isinf(want[i]) || isinf(got[i])) {
      err = got[i] == want[i] ? 0.0 : INFINITY;
    } else {
      err = fabs(got[i] - want[i]);
      if (err != err) err = INFINITY;
    }
    if (err > worst) worst = err;
  }
  return worst;
}

#define CHECK_CLOSE(what, got, want, n, tolerance)                                                            \
  do {                                                                                                        \
    const double err_ = maxAbsError((got), (want), (n));                                                      \
    CHECK(err_ <= (tolerance), "%s: max |error| %.3g > %.3g", (what), err_, (double)(tolerance));             \
  } while (0)

/* ------------------------------------------------------------------------------------------------------------- */
/* Library, handle and descriptors                                                                                 */

static void testNoErrorBeforeFirstFailure(void) {
  char buffer[16] = "untouched";
  CHECK(flashAttnGetLastErrorMessage(NULL, 0) == 0, "a message exists before any call failed");
  CHECK(flashAttnGetLastErrorMessage(buffer, sizeof buffer) == 0, "a message exists before any call failed");
  CHECK(buffer[0] == '\0', "an empty message must still be NUL-terminated, got \"%s\"", buffer);
}

static void testVersion(void) {
  const int32_t runtime = flashAttnGetVersion();
  CHECK(FLASHATTN_VERSION == FLASHATTN_VERSION_MAJOR * 10000 + FLASHATTN_VERSION_MINOR * 100 + FLASHATTN_VERSION_PATCH,
        "FLASHATTN_VERSION %d does not follow MAJOR*10000 + MINOR*100 + PATCH", FLASHATTN_VERSION);
  CHECK(runtime == FLASHATTN_VERSION, "header version %d, library version %d", FLASHATTN_VERSION, (int)runtime);
  CHECK(headerOnlyTranslationUnitVersion() == runtime, "header-only unit saw version %d",
        (int)headerOnlyTranslationUnitVersion());
}

static void testErrorStrings(void) {
  static const flashAttnStatus_t known[] = {
      FLASHATTN_STATUS_SUCCESS,         FLASHATTN_STATUS_NOT_INITIALIZED,        FLASHATTN_STATUS_BAD_PARAM,
      FLASHATTN_STATUS_NOT_SUPPORTED,   FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE, FLASHATTN_STATUS_ALLOC_FAILED,
      FLASHATTN_STATUS_ARCH_MISMATCH,   FLASHATTN_STATUS_NO_DEVICE,              FLASHATTN_STATUS_EXECUTION_FAILED,
      FLASHATTN_STATUS_INTERNAL_ERROR};
  static const char *const names[] = {"SUCCESS",       "NOT_INITIALIZED", "BAD_PARAM",        "NOT_SUPPORTED",
                                      "INSUFFICIENT_WORKSPACE", "ALLOC_FAILED", "ARCH_MISMATCH", "NO_DEVICE",
                                      "EXECUTION_FAILED", "INTERNAL_ERROR"};
  const size_t count = sizeof known / sizeof known[0];
  const char *unknownHigh = flashAttnGetErrorString((flashAttnStatus_t)4242);
  const char *unknownNegative = flashAttnGetErrorString((flashAttnStatus_t)-1);
  size_t i, j;
  CHECK(known[count - 1] == 9, "the status enum was renumbered");
  for (i = 0; i < count; ++i) {
    const char *text = flashAttnGetErrorString(known[i]);
    CHECK(text != NULL && text[0] != '\0', "status %d has no string", (int)known[i]);
    if (!text) continue;
    CHECK(strstr(text, names[i]) != NULL, "status %d reads \"%s\", which does not name %s", (int)known[i], text,
          names[i]);
    CHECK(unknownHigh == NULL || strcmp(text, unknownHigh) != 0, "status %d reads like an unknown one", (int)known[i]);
    for (j = 0; j < i; ++j) {
      const char *other = flashAttnGetErrorString(known[j]);
      CHECK(other == NULL || strcmp(text, other) != 0, "statuses %d and %d share \"%s\"", (int)known[i],
            (int)known[j], text);
    }
  }
  CHECK(unknownHigh != NULL && strcmp(unknownHigh, "FLASHATTN_STATUS_UNKNOWN") == 0, "status 4242 reads \"%s\"",
        unknownHigh ? unknownHigh : "(null)");
  CHECK(unknownNegative != NULL && strcmp(unknownNegative, "FLASHATTN_STATUS_UNKNOWN") == 0,
        "status -1 reads \"%s\"", unknownNegative ? unknownNegative : "(null)");
}

static void testHandle(void) {
  flashAttnHandle_t handle = NULL, automatic = NULL;
  flashAttnBackend_t backend = FLASHATTN_BACKEND_AUTO;
  struct CUstream_st *stream = (struct CUstream_st *)&backend; /* any non-NULL value, overwritten by the getter */

  CHECK_OK(flashAttnCreateWithBackend(&handle, FLASHATTN_BACKEND_HOST));
  CHECK(handle != NULL, "no handle returned");
  CHECK_OK(flashAttnGetBackend(handle, &backend));
  CHECK(backend == FLASHATTN_BACKEND_HOST, "HOST handle reports backend %d", (int)backend);
  CHECK_OK(flashAttnGetStream(handle, &stream));
  CHECK(stream == NULL, "a new handle must use the default stream");
  CHECK_OK(flashAttnSetStream(handle, NULL));
  CHECK_OK(flashAttnGetStream(handle, &stream));
  CHECK(stream == NULL, "the default stream did not round-trip");
  CHECK_OK(flashAttnDestroy(handle));

  /* AUTO picks CUDA or HOST depending on the machine; either way it never reports AUTO. */
  CHECK_OK(flashAttnCreate(&automatic));
  backend = FLASHATTN_BACKEND_AUTO;
  CHECK_OK(flashAttnGetBackend(automatic, &backend));
  CHECK(backend == FLASHATTN_BACKEND_CUDA || backend == FLASHATTN_BACKEND_HOST, "AUTO handle reports backend %d",
        (int)backend);
  CHECK_OK(flashAttnDestroy(automatic));

  CHECK_OK(flashAttnDestroy(NULL));
}

static void testTensorDescriptor(void) {
  const int64_t dims[4] = {3, 5, 7, 64};
  const int64_t strides[4] = {7 * 5 * 80, 80, 5 * 80, 1}; /* BSHD with padded rows */
  flashAttnTensorDescriptor_t desc = NULL;
  flashAttnDataType_t dtype = FLASHATTN_DATA_FP32;
  int32_t rank = 0;
  int64_t gotDims[4] = {-9, -9, -9, -9}, gotStrides[4] = {-9, -9, -9, -9};
  int i;

  CHECK_OK(flashAttnCreateTensorDescriptor(&desc));
  CHECK_STATUS(flashAttnGetTensorDescriptor(desc, 4, &dtype, &rank, gotDims, gotStrides),
               FLASHATTN_STATUS_NOT_INITIALIZED);
  CHECK_OK(flashAttnSetTensorDescriptor(desc, FLASHATTN_DATA_BF16, 4, dims, strides));
  CHECK_OK(flashAttnGetTensorDescriptor(desc, 4, &dtype, &rank, gotDims, gotStrides));
  CHECK(dtype == FLASHATTN_DATA_BF16 && rank == 4, "dtype %d rank %d", (int)dtype, (int)rank);
  for (i = 0; i < 4; ++i)
    CHECK(gotDims[i] == dims[i] && gotStrides[i] == strides[i], "axis %d: dim %lld stride %lld", i,
          (long long)gotDims[i], (long long)gotStrides[i]);

  /* A smaller capacity gets the leading axes only and the full rank. */
  for (i = 0; i < 4; ++i) gotDims[i] = gotStrides[i] = -9;
  CHECK_OK(flashAttnGetTensorDescriptor(desc, 2, NULL, &rank, gotDims, gotStrides));
  CHECK(rank == 4, "rank %d with maxRank 2", (int)rank);
  CHECK(gotDims[0] == 3 && gotDims[1] == 5 && gotDims[2] == -9, "maxRank 2 wrote dims %lld %lld %lld",
        (long long)gotDims[0], (long long)gotDims[1], (long long)gotDims[2]);
  CHECK(gotStrides[1] == 80 && gotStrides[2] == -9, "maxRank 2 wrote strides %lld, %lld", (long long)gotStrides[1],
        (long long)gotStrides[2]);
  CHECK_OK(flashAttnGetTensorDescriptor(desc, 0, NULL, NULL, NULL, NULL));

  /* A rejected Set leaves the descriptor as it was. */
  {
    const int64_t badStrides[4] = {7 * 5 * 80, 80, 5 * 80, 2};
    CHECK_STATUS(flashAttnSetTensorDescriptor(desc, FLASHATTN_DATA_FP16, 4, dims, badStrides),
                 FLASHATTN_STATUS_BAD_PARAM);
    CHECK_OK(flashAttnGetTensorDescriptor(desc, 4, &dtype, &rank, gotDims, gotStrides));
    CHECK(dtype == FLASHATTN_DATA_BF16 && gotStrides[3] == 1, "a failed Set changed the descriptor");
  }

  /* Re-setting to another rank replaces everything. */
  {
    const int64_t lseDims[3] = {3, 5, 7};
    const int64_t lseStrides[3] = {35, 7, 1};
    CHECK_OK(flashAttnSetTensorDescriptor(desc, FLASHATTN_DATA_FP32, 3, lseDims, lseStrides));
    CHECK_OK(flashAttnGetTensorDescriptor(desc, 4, &dtype, &rank, gotDims, gotStrides));
    CHECK(dtype == FLASHATTN_DATA_FP32 && rank == 3 && gotDims[2] == 7 && gotStrides[0] == 35,
          "re-set descriptor reads dtype %d rank %d", (int)dtype, (int)rank);
  }
  CHECK_OK(flashAttnDestroyTensorDescriptor(desc));
  CHECK_OK(flashAttnDestroyTensorDescriptor(NULL));
}

static void testAttentionDescriptor(void) {
  flashAttnAttentionDescriptor_t desc = NULL;
  float scale = -1.f, softcap = -1.f;
  flashAttnMaskMode_t mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  int64_t left = 7, right = 7;
  const float slopes[2] = {0.5f, 0.25f};
  const float *gotSlopes = slopes;
  int32_t perBatch = 7, deterministic = 7;

  CHECK_OK(flashAttnCreateAttentionDescriptor(&desc));
  CHECK_OK(flashAttnGetAttentionScale(desc, &scale));
  CHECK_OK(flashAttnGetAttentionMask(desc, &mask));
  CHECK_OK(flashAttnGetAttentionWindow(desc, &left, &right));
  CHECK_OK(flashAttnGetAttentionSoftcap(desc, &softcap));
  CHECK_OK(flashAttnGetAttentionAlibiSlopes(desc, &gotSlopes, &perBatch));
  CHECK_OK(flashAttnGetAttentionDeterministic(desc, &deterministic));
  CHECK(scale == 0.f && mask == FLASHATTN_MASK_NONE && left == -1 && right == -1 && softcap == 0.f &&
            gotSlopes == NULL && perBatch == 0 && deterministic == 0,
        "defaults: scale %g mask %d window (%lld, %lld) softcap %g slopes %p perBatch %d deterministic %d",
        (double)scale, (int)mask, (long long)left, (long long)right, (double)softcap, (const void *)gotSlopes,
        (int)perBatch, (int)deterministic);

  CHECK_OK(flashAttnSetAttentionScale(desc, 0.125f));
  CHECK_OK(flashAttnSetAttentionMask(desc, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT));
  CHECK_OK(flashAttnSetAttentionWindow(desc, 5, 0));
  CHECK_OK(flashAttnSetAttentionSoftcap(desc, 30.f));
  CHECK_OK(flashAttnSetAttentionAlibiSlopes(desc, slopes, 1));
  CHECK_OK(flashAttnSetAttentionDeterministic(desc, 1));
  CHECK_OK(flashAttnGetAttentionScale(desc, &scale));
  CHECK_OK(flashAttnGetAttentionMask(desc, &mask));
  CHECK_OK(flashAttnGetAttentionWindow(desc, &left, &right));
  CHECK_OK(flashAttnGetAttentionSoftcap(desc, &softcap));
  CHECK_OK(flashAttnGetAttentionAlibiSlopes(desc, &gotSlopes, NULL));
  CHECK_OK(flashAttnGetAttentionAlibiSlopes(desc, &gotSlopes, &perBatch));
  CHECK_OK(flashAttnGetAttentionDeterministic(desc, &deterministic));
  CHECK(scale == 0.125f && mask == FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT && left == 5 && right == 0 && softcap == 30.f &&
            gotSlopes == slopes && perBatch == 1 && deterministic == 1,
        "round trip: scale %g mask %d window (%lld, %lld) softcap %g slopes %p perBatch %d deterministic %d",
        (double)scale, (int)mask, (long long)left, (long long)right, (double)softcap, (const void *)gotSlopes,
        (int)perBatch, (int)deterministic);

  /* A scale must be positive: zero is refused and the descriptor keeps its scale. NULL slopes turn ALiBi off. */
  CHECK_STATUS(flashAttnSetAttentionScale(desc, 0.f), FLASHATTN_STATUS_BAD_PARAM);
  CHECK_OK(flashAttnGetAttentionScale(desc, &scale));
  CHECK(scale == 0.125f, "scale after a refused set %g", (double)scale);
  CHECK_OK(flashAttnSetAttentionAlibiSlopes(desc, NULL, 0));
  CHECK_OK(flashAttnGetAttentionAlibiSlopes(desc, &gotSlopes, &perBatch));
  CHECK(gotSlopes == NULL && perBatch == 0, "ALiBi still on: %p %d", (const void *)gotSlopes, (int)perBatch);

  /* Attention sinks and their gradient: off by default, round trip, refused when misaligned, NULL turns them off. */
  {
    const float sinks[2] = {1.5f, -0.5f};
    float dSinks[2] = {0.f, 0.f};
    const float *gotSinks = sinks;
    float *gotDSinks = dSinks;
    CHECK_OK(flashAttnGetAttentionSinks(desc, &gotSinks));
    CHECK_OK(flashAttnGetAttentionSinksGradient(desc, &gotDSinks));
    CHECK(gotSinks == NULL && gotDSinks == NULL, "sinks default: %p %p", (const void *)gotSinks, (void *)gotDSinks);
    CHECK_OK(flashAttnSetAttentionSinks(desc, sinks));
    CHECK_OK(flashAttnSetAttentionSinksGradient(desc, dSinks));
    CHECK_OK(flashAttnGetAttentionSinks(desc, &gotSinks));
    CHECK_OK(flashAttnGetAttentionSinksGradient(desc, &gotDSinks));
    CHECK(gotSinks == sinks && gotDSinks == dSinks, "sinks round trip: %p %p", (const void *)gotSinks,
          (void *)gotDSinks);
    CHECK_STATUS(flashAttnSetAttentionSinks(desc, (const float *)((const char *)sinks + 2)), FLASHATTN_STATUS_BAD_PARAM);
    CHECK_STATUS(flashAttnSetAttentionSinksGradient(desc, (float *)((char *)dSinks + 1)), FLASHATTN_STATUS_BAD_PARAM);
    CHECK_STATUS(flashAttnGetAttentionSinks(desc, NULL), FLASHATTN_STATUS_BAD_PARAM);
    CHECK_STATUS(flashAttnGetAttentionSinksGradient(desc, NULL), FLASHATTN_STATUS_BAD_PARAM);
    CHECK_OK(flashAttnGetAttentionSinks(desc, &gotSinks));
    CHECK(gotSinks == sinks, "sinks after a refused set %p", (const void *)gotSinks);
    CHECK_OK(flashAttnSetAttentionSinks(desc, NULL));
    CHECK_OK(flashAttnSetAttentionSinksGradient(desc, NULL));
    CHECK_OK(flashAttnGetAttentionSinks(desc, &gotSinks));
    CHECK_OK(flashAttnGetAttentionSinksGradient(desc, &gotDSinks));
    CHECK(gotSinks == NULL && gotDSinks == NULL, "sinks still on: %p %p", (const void *)gotSinks, (void *)gotDSinks);
  }

  CHECK_OK(flashAttnDestroyAttentionDescriptor(desc));
  CHECK_OK(flashAttnDestroyAttentionDescriptor(NULL));
}

static void testSeqDescriptor(void) {
  const int32_t cuQ[3] = {0, 3, 8}, cuK[3] = {0, 4, 4}, lengths[2] = {9, 2}, table[4] = {3, 1, 0, 2};
  flashAttnSeqDescriptor_t desc = NULL;
  int64_t batch = -1, maxQ = -1, maxK = -1, pages = -1;
  const int32_t *gotQ = cuQ, *gotK = cuK, *gotLengths = lengths, *gotTable = table;

  CHECK_OK(flashAttnCreateSeqDescriptor(&desc));
  CHECK_OK(flashAttnGetSeqRagged(desc, &batch, &gotQ, &gotK, &maxQ, &maxK));
  CHECK(batch == 0 && gotQ == NULL && gotK == NULL, "a new descriptor is ragged: batch %lld", (long long)batch);
  CHECK_OK(flashAttnGetSeqKvLengths(desc, &batch, &gotLengths));
  CHECK(batch == 0 && gotLengths == NULL, "a new descriptor has KV lengths: batch %lld", (long long)batch);
  CHECK_OK(flashAttnGetSeqPaged(desc, &batch, &gotTable, &pages));
  CHECK(batch == 0 && gotTable == NULL, "a new descriptor is paged: batch %lld", (long long)batch);

  CHECK_OK(flashAttnSetSeqRagged(desc, 2, cuQ, cuK, 5, 4));
  CHECK_OK(flashAttnSetSeqKvLengths(desc, 2, lengths));
  CHECK_OK(flashAttnSetSeqPaged(desc, 2, table, 2));
  CHECK_OK(flashAttnGetSeqRagged(desc, &batch, &gotQ, &gotK, &maxQ, &maxK));
  CHECK(batch == 2 && gotQ == cuQ && gotK == cuK && maxQ == 5 && maxK == 4, "ragged: batch %lld max %lld %lld",
        (long long)batch, (long long)maxQ, (long long)maxK);
  CHECK_OK(flashAttnGetSeqRagged(desc, NULL, NULL, NULL, NULL, NULL));
  CHECK_OK(flashAttnGetSeqKvLengths(desc, &batch, &gotLengths));
  CHECK(batch == 2 && gotLengths == lengths, "KV lengths: batch %lld", (long long)batch);
  CHECK_OK(flashAttnGetSeqPaged(desc, &batch, &gotTable, &pages));
  CHECK(batch == 2 && gotTable == table && pages == 2, "paged: batch %lld pages %lld", (long long)batch,
        (long long)pages);

  CHECK_OK(flashAttnSetSeqRagged(desc, 2, NULL, NULL, 5, 4));
  CHECK_OK(flashAttnSetSeqKvLengths(desc, 2, NULL));
  CHECK_OK(flashAttnSetSeqPaged(desc, 2, NULL, 2));
  CHECK_OK(flashAttnGetSeqRagged(desc, &batch, &gotQ, NULL, NULL, NULL));
  CHECK(batch == 0 && gotQ == NULL, "ragged mode not left: batch %lld", (long long)batch);
  CHECK_OK(flashAttnGetSeqKvLengths(desc, &batch, &gotLengths));
  CHECK(batch == 0 && gotLengths == NULL, "KV lengths not cleared: batch %lld", (long long)batch);
  CHECK_OK(flashAttnGetSeqPaged(desc, &batch, &gotTable, NULL));
  CHECK(batch == 0 && gotTable == NULL, "block table not cleared: batch %lld", (long long)batch);

  CHECK_OK(flashAttnDestroySeqDescriptor(desc));
  CHECK_OK(flashAttnDestroySeqDescriptor(NULL));
}

/* ------------------------------------------------------------------------------------------------------------- */
/* Operations on the HOST backend                                                                                  */

enum { BATCH = 2, HEADS = 4, KV_HEADS = 2, HEAD_DIM = 16 };

/* Q/O in BSHD (sequence outer, rows padded by 3 elements), K/V in BHSD, so both stride orders are exercised. */
static void initBshd(Tensor *t, flashAttnDataType_t dtype, int64_t b, int64_t h, int64_t s, int64_t d) {
  const int64_t dims[4] = {b, h, s, d};
  const int64_t row = d + 3;
  const int64_t strides[4] = {s * h * row, row, h * row, 1};
  tensorInit(t, dtype, 4, dims, strides);
}

static void initBhsd(Tensor *t, flashAttnDataType_t dtype, int64_t b, int64_t h, int64_t s, int64_t d) {
  const int64_t dims[4] = {b, h, s, d};
  tensorInitPacked(t, dtype, 4, dims);
}

static void initLse(Tensor *t, int64_t b, int64_t h, int64_t s) {
  const int64_t dims[3] = {b, h, s};
  tensorInitPacked(t, FLASHATTN_DATA_FP32, 3, dims);
}

typedef struct {
  const char *name;
  flashAttnDataType_t dtype;
  int64_t seqQ, seqK;
  flashAttnMaskMode_t mask;
  int64_t windowLeft, windowRight;
  float softcap;
  float scale; /* 0 = leave the default 1/sqrt(headDim) */
  int useAlibi;
  double tolerance;
} ForwardCase;

static void runForwardCase(flashAttnHandle_t handle, const ForwardCase *c) {
  static const float slopes[HEADS] = {0.5f, 0.25f, 0.125f, 0.0625f};
  static const double slopesDouble[HEADS] = {0.5, 0.25, 0.125, 0.0625};
  Tensor q, k, v, o, lse;
  flashAttnAttentionDescriptor_t attn = NULL;
  Naive naive;
  double *qc, *kc, *vc, *oRef, *lseRef, *oGot, *lseGot;
  const int64_t qCount = BATCH * HEADS * c->seqQ * HEAD_DIM, kCount = BATCH * KV_HEADS * c->seqK * HEAD_DIM;
  const int64_t rows = BATCH * HEADS * c->seqQ;
  size_t workspaceBytes = (size_t)-1;
  Workspace workspace;

  initBshd(&q, c->dtype, BATCH, HEADS, c->seqQ, HEAD_DIM);
  initBhsd(&k, c->dtype, BATCH, KV_HEADS, c->seqK, HEAD_DIM);
  initBhsd(&v, c->dtype, BATCH, KV_HEADS, c->seqK, HEAD_DIM);
  initBshd(&o, c->dtype, BATCH, HEADS, c->seqQ, HEAD_DIM);
  initLse(&lse, BATCH, HEADS, c->seqQ);
  qc = randomArray(qCount);
  kc = randomArray(kCount);
  vc = randomArray(kCount);
  tensorUpload(&q, qc);
  tensorUpload(&k, kc);
  tensorUpload(&v, vc);

  CHECK_OK(flashAttnCreateAttentionDescriptor(&attn));
  if (c->scale > 0) CHECK_OK(flashAttnSetAttentionScale(attn, c->scale));
  CHECK_OK(flashAttnSetAttentionMask(attn, c->mask));
  CHECK_OK(flashAttnSetAttentionWindow(attn, c->windowLeft, c->windowRight));
  CHECK_OK(flashAttnSetAttentionSoftcap(attn, c->softcap));
  CHECK_OK(flashAttnSetAttentionAlibiSlopes(attn, c->useAlibi ? slopes : NULL, 0));

  CHECK_OK(flashAttnForwardGetWorkspaceSize(handle, attn, NULL, q.desc, k.desc, v.desc, o.desc, lse.desc,
                                            &workspaceBytes));
  CHECK(workspaceBytes != (size_t)-1, "%s: workspace size not written", c->name);
  workspaceInit(&workspace, workspaceBytes);
  CHECK_OK(flashAttnForward(handle, attn, NULL, q.desc, q.data, k.desc, k.data, v.desc, v.data, o.desc, o.data,
                            lse.desc, (float *)lse.data, workspace.aligned, workspace.bytes));

  naive.batch = BATCH;
  naive.heads = HEADS;
  naive.kvHeads = KV_HEADS;
  naive.seqQ = c->seqQ;
  naive.seqK = c->seqK;
  naive.headDim = naive.headDimV = HEAD_DIM;
  naive.scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)HEAD_DIM);
  naive.softcap = c->softcap;
  naive.mask = c->mask;
  naive.windowLeft = c->windowLeft;
  naive.windowRight = c->windowRight;
  naive.alibiSlopes = c->useAlibi ? slopesDouble : NULL;
  naive.kvLengths = NULL;
  oRef = zeroArray(qCount);
  lseRef = zeroArray(rows);
  oGot = zeroArray(qCount);
  lseGot = zeroArray(rows);
  naiveForward(&naive, qc, kc, vc, oRef, lseRef);
  tensorDownload(&o, oGot);
  tensorDownload(&lse, lseGot);
  CHECK_CLOSE(c->name, oGot, oRef, qCount, c->tolerance);
  CHECK_CLOSE(c->name, lseGot, lseRef, rows, 1e-4);

  /* The same call without LSE gives the same O. */
  tensorPoison(&o);
  CHECK_OK(flashAttnForward(handle, attn, NULL, q.desc, q.data, k.desc, k.data, v.desc, v.data, o.desc, o.data, NULL,
                            NULL, workspace.aligned, workspace.bytes));
  tensorDownload(&o, oGot);
  CHECK_CLOSE(c->name, oGot, oRef, qCount, c->tolerance);

  CHECK_OK(flashAttnDestroyAttentionDescriptor(attn));
  workspaceFree(&workspace);
  free(qc), free(kc), free(vc), free(oRef), free(lseRef), free(oGot), free(lseGot);
  tensorFree(&q), tensorFree(&k), tensorFree(&v), tensorFree(&o), tensorFree(&lse);
}

static void testForward(flashAttnHandle_t handle) {
  /* Bottom-right causal with seqQ > seqK leaves the first rows without a visible key: O = 0, LSE = -inf. */
  static const ForwardCase cases[] = {
      {"forward fp32 plain", FLASHATTN_DATA_FP32, 5, 7, FLASHATTN_MASK_NONE, -1, -1, 0.f, 0.f, 0, 2e-5},
      {"forward fp32 causal bottom-right, empty rows", FLASHATTN_DATA_FP32, 6, 4, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT,
       -1, -1, 0.f, 0.3f, 0, 2e-5},
      {"forward fp32 window+softcap+alibi", FLASHATTN_DATA_FP32, 7, 9, FLASHATTN_MASK_NONE, 2, 1, 5.f, 0.f, 1, 2e-5},
      {"forward fp32 causal top-left", FLASHATTN_DATA_FP32, 5, 8, FLASHATTN_MASK_CAUSAL_TOP_LEFT, -1, -1, 0.f, 0.f, 0,
       2e-5},
      {"forward bf16 plain", FLASHATTN_DATA_BF16, 4, 6, FLASHATTN_MASK_NONE, -1, -1, 0.f, 0.f, 0, 2e-2},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) runForwardCase(handle, &cases[i]);
}

static void testBackward(flashAttnHandle_t handle) {
  enum { SEQ_Q = 5, SEQ_K = 4 }; /* bottom-right causal: row 0 sees nothing and must get zero gradient */
  const int64_t qCount = BATCH * HEADS * SEQ_Q * HEAD_DIM, kCount = BATCH * KV_HEADS * SEQ_K * HEAD_DIM;
  Tensor q, k, v, o, lse, dO, dQ, dK, dV;
  flashAttnAttentionDescriptor_t attn = NULL;
  Naive naive;
  double *qc, *kc, *vc, *dOc, *dQRef, *dKRef, *dVRef, *dQGot, *dKGot, *dVGot;
  size_t forwardBytes = 0, backwardBytes = (size_t)-1;
  Workspace forwardWorkspace, backwardWorkspace;
  int32_t deterministic;

  initBhsd(&q, FLASHATTN_DATA_FP32, BATCH, HEADS, SEQ_Q, HEAD_DIM);
  initBhsd(&k, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, SEQ_K, HEAD_DIM);
  initBshd(&v, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, SEQ_K, HEAD_DIM);
  initBhsd(&o, FLASHATTN_DATA_FP32, BATCH, HEADS, SEQ_Q, HEAD_DIM);
  initLse(&lse, BATCH, HEADS, SEQ_Q);
  initBshd(&dO, FLASHATTN_DATA_FP32, BATCH, HEADS, SEQ_Q, HEAD_DIM); /* other strides than O */
  initBhsd(&dQ, FLASHATTN_DATA_FP32, BATCH, HEADS, SEQ_Q, HEAD_DIM);
  initBhsd(&dK, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, SEQ_K, HEAD_DIM);
  initBhsd(&dV, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, SEQ_K, HEAD_DIM);
  qc = randomArray(qCount);
  kc = randomArray(kCount);
  vc = randomArray(kCount);
  dOc = randomArray(qCount);
  tensorUpload(&q, qc);
  tensorUpload(&k, kc);
  tensorUpload(&v, vc);
  tensorUpload(&dO, dOc);

  CHECK_OK(flashAttnCreateAttentionDescriptor(&attn));
  CHECK_OK(flashAttnSetAttentionMask(attn, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT));
  CHECK_OK(flashAttnSetAttentionSoftcap(attn, 4.f));
  for (deterministic = 0; deterministic <= 1; ++deterministic) {
    CHECK_OK(flashAttnSetAttentionDeterministic(attn, deterministic));
    CHECK_OK(flashAttnForwardGetWorkspaceSize(handle, attn, NULL, q.desc, k.desc, v.desc, o.desc, lse.desc,
                                              &forwardBytes));
    workspaceInit(&forwardWorkspace, forwardBytes);
    CHECK_OK(flashAttnForward(handle, attn, NULL, q.desc, q.data, k.desc, k.data, v.desc, v.data, o.desc, o.data,
                              lse.desc, (float *)lse.data, forwardWorkspace.aligned, forwardWorkspace.bytes));
    CHECK_OK(flashAttnBackwardGetWorkspaceSize(handle, attn, NULL, q.desc, k.desc, v.desc, o.desc, lse.desc,
                                               &backwardBytes));
    CHECK(backwardBytes != (size_t)-1, "backward workspace size not written");
    {
      /* The query that sees the gradients: never less than the one that does not. */
      size_t withGradients = (size_t)-1;
      CHECK_OK(flashAttnBackwardGetWorkspaceSizeWithGradients(handle, attn, NULL, q.desc, k.desc, v.desc, o.desc,
                                                              dO.desc, lse.desc, dQ.desc, dK.desc, dV.desc,
                                                              &withGradients));
      CHECK(withGradients != (size_t)-1 && withGradients >= backwardBytes,
            "backward workspace size with gradients not written or smaller");
      backwardBytes = withGradients;
    }
    workspaceInit(&backwardWorkspace, backwardBytes);
    tensorPoison(&dQ), tensorPoison(&dK), tensorPoison(&dV);
    CHECK_OK(flashAttnBackward(handle, attn, NULL, q.desc, q.data, k.desc, k.data, v.desc, v.data, o.desc, o.data,
                               dO.desc, dO.data, lse.desc, (const float *)lse.data, dQ.desc, dQ.data, dK.desc,
                               dK.data, dV.desc, dV.data, backwardWorkspace.aligned, backwardWorkspace.bytes));
    workspaceFree(&forwardWorkspace);
    workspaceFree(&backwardWorkspace);

    naive.batch = BATCH;
    naive.heads = HEADS;
    naive.kvHeads = KV_HEADS;
    naive.seqQ = SEQ_Q;
    naive.seqK = SEQ_K;
    naive.headDim = naive.headDimV = HEAD_DIM;
    naive.scale = 1.0 / sqrt((double)HEAD_DIM);
    naive.softcap = 4.0;
    naive.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    naive.windowLeft = naive.windowRight = -1;
    naive.alibiSlopes = NULL;
    naive.kvLengths = NULL;
    dQRef = zeroArray(qCount), dKRef = zeroArray(kCount), dVRef = zeroArray(kCount);
    dQGot = zeroArray(qCount), dKGot = zeroArray(kCount), dVGot = zeroArray(kCount);
    naiveBackward(&naive, qc, kc, vc, dOc, dQRef, dKRef, dVRef);
    tensorDownload(&dQ, dQGot);
    tensorDownload(&dK, dKGot);
    tensorDownload(&dV, dVGot);
    CHECK_CLOSE(deterministic ? "backward dV (deterministic)" : "backward dV", dVGot, dVRef, kCount, 1e-4);
    CHECK_CLOSE(deterministic ? "backward dK (deterministic)" : "backward dK", dKGot, dKRef, kCount, 1e-4);
    CHECK_CLOSE(deterministic ? "backward dQ (deterministic)" : "backward dQ", dQGot, dQRef, qCount, 1e-4);
    free(dQRef), free(dKRef), free(dVRef), free(dQGot), free(dKGot), free(dVGot);
  }

  CHECK_OK(flashAttnDestroyAttentionDescriptor(attn));
  free(qc), free(kc), free(vc), free(dOc);
  tensorFree(&q), tensorFree(&k), tensorFree(&v), tensorFree(&o), tensorFree(&lse);
  tensorFree(&dO), tensorFree(&dQ), tensorFree(&dK), tensorFree(&dV);
}

/* Decode of SEQ_Q tokens per sequence against a cache of CAPACITY rows of which kvLengths[b] are used, contiguous
 * and paged; every chunk count must give the naive result. Unused cache rows hold NaN, which must not leak. */
static void testDecode(flashAttnHandle_t handle) {
  enum { SEQ_Q = 3, CAPACITY = 24, PAGE = 4, PAGES_PER_SEQ = CAPACITY / PAGE, NUM_PAGES = BATCH * PAGES_PER_SEQ + 1 };
  static const int32_t kvLengths[BATCH] = {17, 3};
  static const int32_t chunkCounts[] = {0, 1, 3, 5};
  /* Pages of both sequences interleaved and shuffled; page 7 belongs to no one. */
  static const int32_t blockTable[BATCH * PAGES_PER_SEQ] = {12, 3, 9, 0, 5, 10, 1, 8, 11, 2, 6, 4};
  const int64_t qCount = BATCH * HEADS * SEQ_Q * HEAD_DIM, kCount = BATCH * KV_HEADS * CAPACITY * HEAD_DIM;
  const int64_t rows = BATCH * HEADS * SEQ_Q;
  const int64_t pagedDims[4] = {NUM_PAGES, PAGE, KV_HEADS, HEAD_DIM};
  Tensor q, kDense, vDense, kPaged, vPaged, o, lse;
  flashAttnAttentionDescriptor_t attn = NULL;
  flashAttnSeqDescriptor_t denseSeq = NULL, pagedSeq = NULL;
  Naive naive;
  double *qc, *kc, *vc, *oRef, *lseRef, *oGot, *lseGot;
  int64_t b, h, t, d;
  size_t c;
  int paged;

  initBhsd(&q, FLASHATTN_DATA_FP32, BATCH, HEADS, SEQ_Q, HEAD_DIM);
  initBhsd(&kDense, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, CAPACITY, HEAD_DIM);
  initBshd(&vDense, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, CAPACITY, HEAD_DIM);
  tensorInitPacked(&kPaged, FLASHATTN_DATA_FP32, 4, pagedDims);
  tensorInitPacked(&vPaged, FLASHATTN_DATA_FP32, 4, pagedDims);
  initBhsd(&o, FLASHATTN_DATA_FP32, BATCH, HEADS, SEQ_Q, HEAD_DIM);
  initLse(&lse, BATCH, HEADS, SEQ_Q);
  qc = randomArray(qCount);
  kc = randomArray(kCount);
  vc = randomArray(kCount);
  tensorUpload(&q, qc);
  tensorUpload(&kDense, kc);
  tensorUpload(&vDense, vc);
  /* Rows past a sequence's length stay NaN (the init poison) in both layouts. */
  for (b = 0; b < BATCH; ++b)
    for (h = 0; h < KV_HEADS; ++h)
      for (t = 0; t < CAPACITY; ++t)
        for (d = 0; d < HEAD_DIM; ++d) {
          const int64_t canonical = ((b * KV_HEADS + h) * CAPACITY + t) * HEAD_DIM + d;
          const int64_t page = blockTable[b * PAGES_PER_SEQ + t / PAGE];
          const int64_t pagedOffset =
              page * kPaged.strides[0] + (t % PAGE) * kPaged.strides[1] + h * kPaged.strides[2] + d;
          if (t >= kvLengths[b]) {
            tensorStore(&kDense, canonicalToOffset(&kDense, canonical), NAN);
            tensorStore(&vDense, canonicalToOffset(&vDense, canonical), NAN);
            continue;
          }
          tensorStore(&kPaged, pagedOffset, kc[canonical]);
          tensorStore(&vPaged, pagedOffset, vc[canonical]);
        }

  CHECK_OK(flashAttnCreateAttentionDescriptor(&attn));
  CHECK_OK(flashAttnSetAttentionMask(attn, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT));
  CHECK_OK(flashAttnCreateSeqDescriptor(&denseSeq));
  CHECK_OK(flashAttnSetSeqKvLengths(denseSeq, BATCH, kvLengths));
  CHECK_OK(flashAttnCreateSeqDescriptor(&pagedSeq));
  CHECK_OK(flashAttnSetSeqKvLengths(pagedSeq, BATCH, kvLengths));
  CHECK_OK(flashAttnSetSeqPaged(pagedSeq, BATCH, blockTable, PAGES_PER_SEQ));

  naive.batch = BATCH;
  naive.heads = HEADS;
  naive.kvHeads = KV_HEADS;
  naive.seqQ = SEQ_Q;
  naive.seqK = CAPACITY;
  naive.headDim = naive.headDimV = HEAD_DIM;
  naive.scale = 1.0 / sqrt((double)HEAD_DIM);
  naive.softcap = 0.0;
  naive.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  naive.windowLeft = naive.windowRight = -1;
  naive.alibiSlopes = NULL;
  naive.kvLengths = kvLengths;
  oRef = zeroArray(qCount);
  lseRef = zeroArray(rows);
  oGot = zeroArray(qCount);
  lseGot = zeroArray(rows);
  naiveForward(&naive, qc, kc, vc, oRef, lseRef);

  for (paged = 0; paged <= 1; ++paged)
    for (c = 0; c < sizeof chunkCounts / sizeof chunkCounts[0]; ++c) {
      const Tensor *k = paged ? &kPaged : &kDense;
      const Tensor *v = paged ? &vPaged : &vDense;
      flashAttnSeqDescriptor_t seq = paged ? pagedSeq : denseSeq;
      char what[64];
      size_t bytes = (size_t)-1;
      Workspace workspace;
      sprintf(what, "decode %s chunks %d", paged ? "paged" : "dense", (int)chunkCounts[c]);
      CHECK_OK(flashAttnDecodeChunkGetWorkspaceSize(handle, attn, seq, q.desc, k->desc, v->desc, o.desc, lse.desc,
                                                    chunkCounts[c], &bytes));
      CHECK(bytes != (size_t)-1, "%s: workspace size not written", what);
      workspaceInit(&workspace, bytes);
      tensorPoison(&o);
      tensorPoison(&lse);
      CHECK_OK(flashAttnDecodeChunk(handle, attn, seq, q.desc, q.data, k->desc, k->data, v->desc, v->data, o.desc,
                                    o.data, lse.desc, (float *)lse.data, chunkCounts[c], workspace.aligned,
                                    workspace.bytes));
      tensorDownload(&o, oGot);
      tensorDownload(&lse, lseGot);
      CHECK_CLOSE(what, oGot, oRef, qCount, 2e-5);
      CHECK_CLOSE(what, lseGot, lseRef, rows, 1e-4);
      workspaceFree(&workspace);
    }

  CHECK_OK(flashAttnDestroySeqDescriptor(denseSeq));
  CHECK_OK(flashAttnDestroySeqDescriptor(pagedSeq));
  CHECK_OK(flashAttnDestroyAttentionDescriptor(attn));
  free(qc), free(kc), free(vc), free(oRef), free(lseRef), free(oGot), free(lseGot);
  tensorFree(&q), tensorFree(&kDense), tensorFree(&vDense), tensorFree(&kPaged), tensorFree(&vPaged);
  tensorFree(&o), tensorFree(&lse);
}

/* Three partial states; state 1 is empty (-inf) on some rows, and one row is empty in every state. */
static void testMerge(flashAttnHandle_t handle) {
  enum { STATES = 3, SEQ_Q = 3, HEAD_DIM_V = 8 };
  const int64_t partialDims[5] = {STATES, BATCH, HEADS, SEQ_Q, HEAD_DIM_V};
  const int64_t partialLseDims[4] = {STATES, BATCH, HEADS, SEQ_Q};
  const int64_t rows = BATCH * HEADS * SEQ_Q, emptyRow = 4;
  const int64_t oCount = rows * HEAD_DIM_V;
  Tensor partialO, partialLse, o, lse;
  double *partialOc, *partialLsec, *oRef, *lseRef, *oGot, *lseGot;
  int64_t s, r, d;
  size_t bytes = (size_t)-1;
  Workspace workspace;

  tensorInitPacked(&partialO, FLASHATTN_DATA_FP32, 5, partialDims);
  tensorInitPacked(&partialLse, FLASHATTN_DATA_FP32, 4, partialLseDims);
  initBshd(&o, FLASHATTN_DATA_FP32, BATCH, HEADS, SEQ_Q, HEAD_DIM_V);
  initLse(&lse, BATCH, HEADS, SEQ_Q);
  partialOc = randomArray(STATES * oCount);
  partialLsec = randomArray(STATES * rows);
  for (r = 0; r < rows; ++r) {
    if (r % 3 == 1) partialLsec[1 * rows + r] = -INFINITY;
    if (r == emptyRow)
      for (s = 0; s < STATES; ++s) partialLsec[s * rows + r] = -INFINITY;
  }
  tensorUpload(&partialO, partialOc);
  tensorUpload(&partialLse, partialLsec);

  oRef = zeroArray(oCount);
  lseRef = zeroArray(rows);
  oGot = zeroArray(oCount);
  lseGot = zeroArray(rows);
  for (r = 0; r < rows; ++r) {
    double maxLse = -INFINITY, sum = 0.0;
    for (s = 0; s < STATES; ++s)
      if (partialLsec[s * rows + r] > maxLse) maxLse = partialLsec[s * rows + r];
    if (maxLse == -INFINITY) {
      lseRef[r] = -INFINITY;
      continue;
    }
    for (s = 0; s < STATES; ++s) sum += exp(partialLsec[s * rows + r] - maxLse);
    lseRef[r] = maxLse + log(sum);
    for (s = 0; s < STATES; ++s) {
      const double weight = exp(partialLsec[s * rows + r] - lseRef[r]);
      for (d = 0; d < HEAD_DIM_V; ++d) oRef[r * HEAD_DIM_V + d] += weight * partialOc[(s * rows + r) * HEAD_DIM_V + d];
    }
  }

  CHECK_OK(flashAttnMergeStatesGetWorkspaceSize(handle, partialO.desc, partialLse.desc, o.desc, lse.desc, &bytes));
  CHECK(bytes != (size_t)-1, "merge workspace size not written");
  workspaceInit(&workspace, bytes);
  CHECK_OK(flashAttnMergeStates(handle, partialO.desc, (const float *)partialO.data, partialLse.desc,
                                (const float *)partialLse.data, o.desc, o.data, lse.desc, (float *)lse.data,
                                workspace.aligned, workspace.bytes));
  tensorDownload(&o, oGot);
  tensorDownload(&lse, lseGot);
  CHECK_CLOSE("merge O", oGot, oRef, oCount, 1e-5);
  CHECK_CLOSE("merge LSE", lseGot, lseRef, rows, 1e-5);
  CHECK(lseGot[emptyRow] == -INFINITY && oGot[emptyRow * HEAD_DIM_V] == 0.0, "all-empty row: LSE %g O %g",
        lseGot[emptyRow], oGot[emptyRow * HEAD_DIM_V]);

  workspaceFree(&workspace);
  free(partialOc), free(partialLsec), free(oRef), free(lseRef), free(oGot), free(lseGot);
  tensorFree(&partialO), tensorFree(&partialLse), tensorFree(&o), tensorFree(&lse);
}

static void testCheckSupport(flashAttnHandle_t handle) {
  Tensor q, k, v, o;
  char description[512], truncated[8];
  int32_t deterministic = 7;
  initBhsd(&q, FLASHATTN_DATA_FP32, BATCH, HEADS, 5, HEAD_DIM);
  initBhsd(&k, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, 6, HEAD_DIM);
  initBhsd(&v, FLASHATTN_DATA_FP32, BATCH, KV_HEADS, 6, HEAD_DIM);
  initBhsd(&o, FLASHATTN_DATA_FP32, BATCH, HEADS, 5, HEAD_DIM);

  memset(description, 0x55, sizeof description);
  CHECK_OK(flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, NULL, NULL, q.desc, k.desc, v.desc, o.desc,
                                 description, sizeof description, &deterministic));
  CHECK(memchr(description, '\0', sizeof description) != NULL, "description not NUL-terminated");
  description[sizeof description - 1] = '\0';
  CHECK(strlen(description) > 0, "empty description");
  CHECK(deterministic == 0 || deterministic == 1, "deterministic flag %d", (int)deterministic);
  CHECK(deterministic == 1, "HOST forward must be deterministic (\"%s\")", description);
  printf("CheckSupport(forward, HOST): %s\n", description);

  memset(truncated, 0x55, sizeof truncated);
  CHECK_OK(flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, NULL, NULL, q.desc, k.desc, v.desc, o.desc, truncated,
                                 sizeof truncated, NULL));
  CHECK(memchr(truncated, '\0', sizeof truncated) != NULL, "truncated description not NUL-terminated");
  truncated[sizeof truncated - 1] = '\0';
  CHECK(strncmp(truncated, description, strlen(truncated)) == 0 &&
            strlen(truncated) == (strlen(description) < sizeof truncated ? strlen(description) : sizeof truncated - 1),
        "truncated description \"%s\" is not a prefix of \"%s\"", truncated, description);
  CHECK_OK(flashAttnCheckSupport(handle, FLASHATTN_OP_BACKWARD, NULL, NULL, q.desc, k.desc, v.desc, o.desc, NULL, 0,
                                 NULL));
  CHECK_OK(flashAttnCheckSupport(handle, FLASHATTN_OP_DECODE_CHUNK, NULL, NULL, q.desc, k.desc, v.desc, o.desc,
                                 description, sizeof description, NULL));
  tensorFree(&q), tensorFree(&k), tensorFree(&v), tensorFree(&o);
}

/* A failing call: Q has 4 heads, K has 3. The status says BAD_PARAM, the message says why. */
static void testLastErrorMessage(flashAttnHandle_t handle) {
  Tensor q, k, v, o;
  char message[512], shortMessage[6];
  size_t length, again;
  flashAttnStatus_t status;
  initBhsd(&q, FLASHATTN_DATA_FP32, 1, 4, 2, HEAD_DIM);
  initBhsd(&k, FLASHATTN_DATA_FP32, 1, 3, 2, HEAD_DIM);
  initBhsd(&v, FLASHATTN_DATA_FP32, 1, 3, 2, HEAD_DIM);
  initBhsd(&o, FLASHATTN_DATA_FP32, 1, 4, 2, HEAD_DIM);
  memset(o.data, 0x3C, (size_t)o.span * 4);

  status = flashAttnForward(handle, NULL, NULL, q.desc, q.data, k.desc, k.data, v.desc, v.data, o.desc, o.data, NULL,
                            NULL, NULL, 0);
  CHECK(status == FLASHATTN_STATUS_BAD_PARAM, "heads 4 vs KV heads 3 returned %s", flashAttnGetErrorString(status));
  length = flashAttnGetLastErrorMessage(message, sizeof message);
  printf("expected failure: %s: %s\n", flashAttnGetErrorString(status), message);
  CHECK(length > 0 && length == strlen(message), "message length %u vs strlen %u", (unsigned)length,
        (unsigned)strlen(message));
  CHECK(strstr(message, "heads") != NULL, "message \"%s\" does not name the heads", message);
  CHECK(strstr(message, "3") != NULL && strstr(message, "4") != NULL, "message \"%s\" does not give the values",
        message);
  {
    const unsigned char *bytes = (const unsigned char *)o.data;
    int64_t i;
    int touched = 0;
    for (i = 0; i < o.span * 4; ++i) touched |= bytes[i] != 0x3C;
    CHECK(!touched, "a rejected forward wrote O");
  }

  /* snprintf-like: the full length whatever the buffer, text truncated and terminated. */
  again = flashAttnGetLastErrorMessage(NULL, 0);
  CHECK(again == length, "length query %u, message %u", (unsigned)again, (unsigned)length);
  memset(shortMessage, 0x55, sizeof shortMessage);
  again = flashAttnGetLastErrorMessage(shortMessage, sizeof shortMessage);
  CHECK(again == length, "truncated query returned %u, message %u", (unsigned)again, (unsigned)length);
  CHECK(shortMessage[sizeof shortMessage - 1] == '\0' && strncmp(shortMessage, message, sizeof shortMessage - 1) == 0,
        "truncated message is not the prefix");

  /* A successful call keeps the message. */
  CHECK_OK(flashAttnGetBackend(handle, &(flashAttnBackend_t){FLASHATTN_BACKEND_AUTO}));
  again = flashAttnGetLastErrorMessage(NULL, 0);
  CHECK(again == length, "a successful call changed the message length to %u", (unsigned)again);
  tensorFree(&q), tensorFree(&k), tensorFree(&v), tensorFree(&o);
}

int main(void) {
  flashAttnHandle_t handle = NULL;
  testNoErrorBeforeFirstFailure();
  testVersion();
  testErrorStrings();
  testHandle();
  testTensorDescriptor();
  testAttentionDescriptor();
  testSeqDescriptor();

  CHECK_OK(flashAttnCreateWithBackend(&handle, FLASHATTN_BACKEND_HOST));
  if (handle) {
    testForward(handle);
    testBackward(handle);
    testDecode(handle);
    testMerge(handle);
    testCheckSupport(handle);
    testLastErrorMessage(handle);
    CHECK_OK(flashAttnDestroy(handle));
  }

  if (failureCount) {
    fprintf(stderr, "c99 consumer: %d check(s) failed\n", failureCount);
    return 1;
  }
  printf("c99 consumer: all checks passed (library %d)\n", (int)flashAttnGetVersion());
  return 0;
}
