// SPDX-License-Identifier: BSD-3-Clause
/**
 * \file flashattn.h
 * \brief libflashattn: FlashAttention for NVIDIA GPUs behind a C ABI.
 *
 * One header, one shared library. Forward and backward attention, split-KV decode ("flash decoding") and merging of
 * partial attention states, on a CUDA backend (sm80 and newer) or a HOST reference backend.
 *
 * The header is C99 and includes no CUDA header: streams are passed as `struct CUstream_st *`, which is exactly
 * `cudaStream_t` and `CUstream`.
 *
 * \section conventions Conventions
 * - Every function returns a ::flashAttnStatus_t (except the version and string queries). On failure the thread-local
 *   message of flashAttnGetLastErrorMessage() names the argument and the values, and no output is written.
 * - Dimensions and strides are `int64_t` element counts. The head-dimension stride must be 1.
 * - Objects are opaque handles created and destroyed by the library. A destroyed object passed again gives
 *   ::FLASHATTN_STATUS_NOT_INITIALIZED when the library can still recognise it.
 * - Threading: a handle serves one thread at a time; distinct handles may be used from distinct threads at once.
 *   Descriptors are plain values: they may be shared between threads for reading once set.
 * - CUDA graphs: on the CUDA backend no operation allocates memory, synchronises with the host or copies device data
 *   to the host, so every operation may be captured into a CUDA graph on the handle's stream.
 */
#ifndef FLASHATTN_FLASHATTN_H
#define FLASHATTN_FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn/flashattn_version.h"

#if defined(_WIN32)
#if defined(FLASHATTN_BUILDING_LIBRARY)
#define FLASHATTN_API __declspec(dllexport)
#else
#define FLASHATTN_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
/** Marks a function exported from libflashattn. */
#define FLASHATTN_API __attribute__((visibility("default")))
#else
#define FLASHATTN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** CUDA stream; a `cudaStream_t` or `CUstream` converts to it without a cast. NULL is the legacy default stream. */
struct CUstream_st;

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup enums Enumerations (values are part of the ABI and never renumbered)
 *  @{ */

/** Result of every operation. */
typedef enum flashAttnStatus_t {
  FLASHATTN_STATUS_SUCCESS = 0,                /**< The call did what was asked. */
  FLASHATTN_STATUS_NOT_INITIALIZED = 1,        /**< A handle or descriptor is NULL, destroyed, or never set. */
  FLASHATTN_STATUS_BAD_PARAM = 2,              /**< An argument is invalid; the message names it. */
  FLASHATTN_STATUS_NOT_SUPPORTED = 3,          /**< Valid, but no kernel serves it on this device or build. */
  FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE = 4, /**< The workspace is smaller than the size query returned. */
  FLASHATTN_STATUS_ALLOC_FAILED = 5,           /**< Host or device memory could not be allocated. */
  FLASHATTN_STATUS_ARCH_MISMATCH = 6,          /**< The GPU is older than the oldest supported arch (sm80). */
  FLASHATTN_STATUS_NO_DEVICE = 7,              /**< The CUDA backend was asked for, but no usable driver or GPU. */
  FLASHATTN_STATUS_EXECUTION_FAILED = 8,       /**< A CUDA call or kernel launch failed. */
  FLASHATTN_STATUS_INTERNAL_ERROR = 9          /**< A bug in libflashattn; please report it with the message. */
} flashAttnStatus_t;

/** Where a handle runs its operations. */
typedef enum flashAttnBackend_t {
  FLASHATTN_BACKEND_AUTO = 0, /**< CUDA when a usable GPU is present, else HOST. */
  FLASHATTN_BACKEND_CUDA = 1, /**< Device pointers, asynchronous on the handle's stream. */
  FLASHATTN_BACKEND_HOST = 2  /**< Host pointers, synchronous, multithreaded reference implementation. It runs
                                   each operation on as many threads as the machine has hardware threads, or on
                                   the number the environment variable `FLASHATTN_HOST_THREADS` gives (a positive
                                   integer, at most 256; read at every call, other values are ignored). */
} flashAttnBackend_t;

/** Storage type of a tensor. The CUDA kernels accumulate in FP32, the HOST backend in FP64. */
typedef enum flashAttnDataType_t {
  FLASHATTN_DATA_FP16 = 0, /**< IEEE binary16. */
  FLASHATTN_DATA_BF16 = 1, /**< bfloat16. */
  FLASHATTN_DATA_FP32 = 2  /**< IEEE binary32. */
} flashAttnDataType_t;

/** Causal masking mode (see docs/semantics.md for the alignment). */
typedef enum flashAttnMaskMode_t {
  FLASHATTN_MASK_NONE = 0,                /**< Every key is visible. */
  FLASHATTN_MASK_CAUSAL_TOP_LEFT = 1,     /**< Key j is visible to query i iff j <= i. */
  FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT = 2  /**< Key j is visible to query i iff j <= i + (seqK - seqQ). */
} flashAttnMaskMode_t;

/** Operation named in flashAttnCheckSupport(). */
typedef enum flashAttnOperation_t {
  FLASHATTN_OP_FORWARD = 0,      /**< flashAttnForward() */
  FLASHATTN_OP_BACKWARD = 1,     /**< flashAttnBackward() */
  FLASHATTN_OP_DECODE_CHUNK = 2, /**< flashAttnDecodeChunk() */
  FLASHATTN_OP_MERGE_STATES = 3  /**< flashAttnMergeStates() */
} flashAttnOperation_t;

/** @} */

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup objects Opaque objects
 *  @{ */

/** Library context: backend, device properties, stream. Create with flashAttnCreate(). */
typedef struct flashAttnContext *flashAttnHandle_t;
/** Data type, dimensions and strides of one tensor. */
typedef struct flashAttnTensorStruct *flashAttnTensorDescriptor_t;
/** Scale, mask, window, softcap, ALiBi and determinism of an attention problem. */
typedef struct flashAttnAttentionStruct *flashAttnAttentionDescriptor_t;
/** Ragged batches, per-sequence KV lengths and paged KV caches. */
typedef struct flashAttnSeqStruct *flashAttnSeqDescriptor_t;

/** @} */

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup library Version and errors
 *  @{ */

/**
 * \brief Version of the library actually loaded, encoded as ::FLASHATTN_VERSION is
 *        (MAJOR*10000 + MINOR*100 + PATCH). Compare with ::FLASHATTN_VERSION to detect a header/library mismatch.
 * \return the runtime version.
 */
FLASHATTN_API int32_t flashAttnGetVersion(void);

/**
 * \brief Static English name of a status.
 * \param[in] status any value, also one this version does not know.
 * \return a static NUL-terminated string, never NULL ("FLASHATTN_STATUS_UNKNOWN" for unknown values).
 */
FLASHATTN_API const char *flashAttnGetErrorString(flashAttnStatus_t status);

/**
 * \brief Copies the message of the last failed call made by this thread.
 *
 * The message names the argument and the values ("K has 6 heads, Q has 8: Q heads must be a multiple of K heads").
 * A successful call does not clear it. Thread-local: calls in other threads do not change it.
 * \param[out] buf where the NUL-terminated message is written, truncated to \p len - 1 characters; may be NULL
 *                 when \p len is 0.
 * \param[in]  len size of \p buf in bytes.
 * \return the length of the whole message without its NUL (like snprintf), 0 when no call has failed yet.
 */
FLASHATTN_API size_t flashAttnGetLastErrorMessage(char *buf, size_t len);

/** @} */

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup handle Handle
 *  @{ */

/**
 * \brief Creates a handle on the AUTO backend: CUDA when a usable GPU is present, else HOST.
 * \param[out] handle receives the new handle.
 * \retval FLASHATTN_STATUS_SUCCESS the handle was created.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p handle is NULL.
 * \retval FLASHATTN_STATUS_ALLOC_FAILED out of host memory.
 */
FLASHATTN_API flashAttnStatus_t flashAttnCreate(flashAttnHandle_t *handle);

/**
 * \brief Creates a handle on a chosen backend.
 *
 * On CUDA the current device of the calling thread is used; its properties are read once and cached.
 * \param[out] handle  receives the new handle.
 * \param[in]  backend ::FLASHATTN_BACKEND_AUTO, ::FLASHATTN_BACKEND_CUDA or ::FLASHATTN_BACKEND_HOST.
 * \retval FLASHATTN_STATUS_SUCCESS the handle was created.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p handle is NULL or \p backend is not a known value.
 * \retval FLASHATTN_STATUS_NO_DEVICE CUDA was asked for and there is no usable driver or GPU.
 * \retval FLASHATTN_STATUS_ARCH_MISMATCH the current GPU is older than sm80.
 * \retval FLASHATTN_STATUS_NOT_SUPPORTED CUDA was asked for and this build has no CUDA backend.
 * \retval FLASHATTN_STATUS_ALLOC_FAILED out of host memory.
 */
FLASHATTN_API flashAttnStatus_t flashAttnCreateWithBackend(flashAttnHandle_t *handle, flashAttnBackend_t backend);

/**
 * \brief Destroys a handle. Work already queued on its stream is not waited for.
 * \param[in] handle a handle, or NULL (then nothing happens and SUCCESS is returned).
 * \retval FLASHATTN_STATUS_SUCCESS destroyed.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p handle was already destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnDestroy(flashAttnHandle_t handle);

/**
 * \brief Tells which backend a handle runs on (never AUTO).
 * \param[in]  handle  a live handle.
 * \param[out] backend receives ::FLASHATTN_BACKEND_CUDA or ::FLASHATTN_BACKEND_HOST.
 * \retval FLASHATTN_STATUS_SUCCESS written.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p handle is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p backend is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetBackend(flashAttnHandle_t handle, flashAttnBackend_t *backend);

/**
 * \brief Binds a CUDA stream to the handle; every later operation is queued on it.
 *
 * A HOST handle accepts any value, keeps it and returns it from flashAttnGetStream(), but never uses it (its
 * operations are synchronous), so code written for either backend may set its stream unconditionally.
 * \param[in] handle a live handle.
 * \param[in] stream a stream of the handle's device, or NULL for the default stream (any value on a HOST handle).
 * \retval FLASHATTN_STATUS_SUCCESS bound.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p handle is NULL or destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetStream(flashAttnHandle_t handle, struct CUstream_st *stream);

/**
 * \brief Returns the stream bound to the handle: the last value given to flashAttnSetStream(), on either backend.
 * \param[in]  handle a live handle.
 * \param[out] stream receives the stream (NULL for the default stream).
 * \retval FLASHATTN_STATUS_SUCCESS written.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p handle is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p stream is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetStream(flashAttnHandle_t handle, struct CUstream_st **stream);

/** @} */

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup tensor Tensor descriptor
 *
 * Dimension order is semantic, strides say the memory layout:
 * - Q, O, dQ, dO: `[batch, heads, seqQ, headDim]`; K, V, dK, dV: `[batch, kvHeads, seqK, headDim]`;
 *   LSE: `[batch, heads, seqQ]` (FP32).
 * - Ragged (packed) batches: Q/O `[totalTokensQ, heads, headDim]`, K/V `[totalTokensK, kvHeads, headDim]`,
 *   LSE `[totalTokensQ, heads]`, with a ragged sequence descriptor.
 * - Paged KV caches (Forward and DecodeChunk): K/V `[numPages, pageSize, kvHeads, headDim]`, with a dense Q/O/LSE, or
 *   with a ragged Q `[totalTokensQ, heads, headDim]` (O and LSE alike) whose seqDesc has no cuSeqlensK.
 * - Merge: partial O `[states, batch, heads, seqQ, headDimV]` and partial LSE `[states, batch, heads, seqQ]`, FP32.
 * Any strides are accepted as long as the last (head-dim) stride is 1 and none is negative; a K/V head stride of 0
 * broadcasts one KV head to all query heads.
 *  @{ */

/** Largest rank a tensor descriptor holds. */
#define FLASHATTN_MAX_TENSOR_RANK 8

/**
 * \brief Creates an unset tensor descriptor.
 * \param[out] desc receives the descriptor.
 * \retval FLASHATTN_STATUS_SUCCESS created.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p desc is NULL.
 * \retval FLASHATTN_STATUS_ALLOC_FAILED out of host memory.
 */
FLASHATTN_API flashAttnStatus_t flashAttnCreateTensorDescriptor(flashAttnTensorDescriptor_t *desc);

/**
 * \brief Sets data type, rank, dimensions and strides (in elements).
 * \param[in] desc     a live descriptor.
 * \param[in] dataType storage type.
 * \param[in] rank     1 to ::FLASHATTN_MAX_TENSOR_RANK.
 * \param[in] dims     \p rank dimensions, each >= 1.
 * \param[in] strides  \p rank strides in elements, each >= 0; the last must be 1.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM an argument is out of range; the descriptor is left unchanged.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetTensorDescriptor(flashAttnTensorDescriptor_t desc,
                                                             flashAttnDataType_t dataType, int32_t rank,
                                                             const int64_t *dims, const int64_t *strides);

/**
 * \brief Reads a tensor descriptor back.
 * \param[in]  desc       a live, set descriptor.
 * \param[in]  maxRank    capacity of \p dims and \p strides.
 * \param[out] dataType   receives the storage type (may be NULL).
 * \param[out] rank       receives the rank (may be NULL).
 * \param[out] dims       receives min(rank, maxRank) dimensions (may be NULL).
 * \param[out] strides    receives min(rank, maxRank) strides (may be NULL).
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL, destroyed or never set.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p maxRank < 0.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetTensorDescriptor(flashAttnTensorDescriptor_t desc, int32_t maxRank,
                                                             flashAttnDataType_t *dataType, int32_t *rank,
                                                             int64_t *dims, int64_t *strides);

/**
 * \brief Destroys a tensor descriptor.
 * \param[in] desc a descriptor, or NULL (nothing happens).
 * \retval FLASHATTN_STATUS_SUCCESS destroyed.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc was already destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnDestroyTensorDescriptor(flashAttnTensorDescriptor_t desc);

/** @} */

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup attention Attention descriptor
 *
 * Defaults: scale 1/sqrt(headDim), no mask, no window, no softcap, no ALiBi, non-deterministic backward.
 * Each setter validates its arguments and leaves the descriptor unchanged when it fails. Every setter returns
 * ::FLASHATTN_STATUS_NOT_INITIALIZED for a NULL or destroyed descriptor; every getter also returns
 * ::FLASHATTN_STATUS_BAD_PARAM for a NULL output pointer.
 *  @{ */

/**
 * \brief Creates an attention descriptor holding the defaults.
 * \param[out] desc receives the descriptor.
 * \retval FLASHATTN_STATUS_SUCCESS created.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p desc is NULL.
 * \retval FLASHATTN_STATUS_ALLOC_FAILED out of host memory.
 */
FLASHATTN_API flashAttnStatus_t flashAttnCreateAttentionDescriptor(flashAttnAttentionDescriptor_t *desc);

/**
 * \brief Destroys an attention descriptor.
 * \param[in] desc a descriptor, or NULL (nothing happens).
 * \retval FLASHATTN_STATUS_SUCCESS destroyed.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc was already destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnDestroyAttentionDescriptor(flashAttnAttentionDescriptor_t desc);

/**
 * \brief Sets the softmax scale applied to Q K^T.
 * \param[in] desc  a live descriptor.
 * \param[in] scale finite and > 0. Until it is set, the default 1/sqrt(headDim) applies.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p scale is NaN, infinite, zero or negative.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionScale(flashAttnAttentionDescriptor_t desc, float scale);

/**
 * \brief Reads the scale.
 * \param[in]  desc  a live descriptor.
 * \param[out] scale receives the scale, or 0 when the default 1/sqrt(headDim) is in effect.
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p scale is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionScale(flashAttnAttentionDescriptor_t desc, float *scale);

/**
 * \brief Sets the causal mask mode.
 * \param[in] desc a live descriptor.
 * \param[in] mask a ::flashAttnMaskMode_t value.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p mask is not a known value.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionMask(flashAttnAttentionDescriptor_t desc,
                                                          flashAttnMaskMode_t mask);

/**
 * \brief Reads the causal mask mode.
 * \param[in]  desc a live descriptor.
 * \param[out] mask receives the mode.
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p mask is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionMask(flashAttnAttentionDescriptor_t desc,
                                                          flashAttnMaskMode_t *mask);

/**
 * \brief Sets a sliding window: query i sees keys j with i' - left <= j <= i' + right, i' = i + (seqK - seqQ).
 * \param[in] desc  a live descriptor.
 * \param[in] left  keys visible before the aligned diagonal, >= 0, or -1 for unbounded (values above 2^40 are
 *                  stored as -1: no sequence is that long).
 * \param[in] right keys visible after the aligned diagonal, >= 0, or -1 for unbounded (likewise).
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p left or \p right is below -1.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionWindow(flashAttnAttentionDescriptor_t desc, int64_t left,
                                                            int64_t right);

/**
 * \brief Reads the sliding window.
 * \param[in]  desc  a live descriptor.
 * \param[out] left  receives the left extent (-1 = unbounded).
 * \param[out] right receives the right extent (-1 = unbounded).
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p left or \p right is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionWindow(flashAttnAttentionDescriptor_t desc, int64_t *left,
                                                            int64_t *right);

/**
 * \brief Sets logit soft-capping: logit = softcap * tanh(logit / softcap).
 * \param[in] desc    a live descriptor.
 * \param[in] softcap finite and >= 0; 0 turns it off.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p softcap is negative, NaN or infinite.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionSoftcap(flashAttnAttentionDescriptor_t desc, float softcap);

/**
 * \brief Reads the softcap.
 * \param[in]  desc    a live descriptor.
 * \param[out] softcap receives the softcap (0 = off).
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p softcap is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionSoftcap(flashAttnAttentionDescriptor_t desc, float *softcap);

/**
 * \brief Sets ALiBi slopes: logit(i, j) += -slope[h] * |j - i'|, i' = i + (seqK - seqQ).
 * \param[in] desc     a live descriptor.
 * \param[in] slopes   FP32 slopes in the backend's memory (device for CUDA, host for HOST), `[heads]` when
 *                     \p perBatch is 0, `[batch, heads]` (contiguous) when 1; NULL turns ALiBi off. The pointer is
 *                     read when an operation runs, not now.
 * \param[in] perBatch 0 or 1.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p perBatch is neither 0 nor 1, or \p slopes is not 4-byte aligned.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionAlibiSlopes(flashAttnAttentionDescriptor_t desc,
                                                                 const float *slopes, int32_t perBatch);

/**
 * \brief Reads the ALiBi slopes.
 * \param[in]  desc     a live descriptor.
 * \param[out] slopes   receives the pointer (NULL = off).
 * \param[out] perBatch receives 0 or 1 (may be NULL).
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p slopes is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionAlibiSlopes(flashAttnAttentionDescriptor_t desc,
                                                                 const float **slopes, int32_t *perBatch);

/**
 * \brief Sets attention sinks: one learned logit per query head that joins every row's softmax denominator without a
 *        value (docs/semantics.md, Attention sinks).
 *
 * With sink s_h, row i of head h has LSE = log(sum_j exp(logit_ij) + exp(s_h)) and O = sum_j exp(logit_ij - LSE) V_j:
 * a row may put weight on "nothing". The sink is in logit units (after scale and softcap; neither applies to it) and
 * sees no mask or ALiBi; a row that sees no key gets O = 0 and LSE = s_h. Forward, DecodeChunk (the sink joins once,
 * however many chunks) and Backward take it; a Backward must be given the sinks its Forward had.
 * flashAttnMergeStates() has no sinks: merging parts of one row's keys, give the sinks to exactly one part.
 * \param[in] desc  a live descriptor.
 * \param[in] sinks FP32 `[heads]` (one per query head) in the backend's memory (device for CUDA, host for HOST); NULL
 *                  turns sinks off. The pointer is read when an operation runs, not now.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p sinks is not 4-byte aligned.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionSinks(flashAttnAttentionDescriptor_t desc, const float *sinks);

/**
 * \brief Reads the attention sinks.
 * \param[in]  desc  a live descriptor.
 * \param[out] sinks receives the pointer (NULL = off).
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p sinks is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionSinks(flashAttnAttentionDescriptor_t desc, const float **sinks);

/**
 * \brief Sets where flashAttnBackward() writes the gradient of the sinks.
 *
 * dSinks[h] = sum over the batch and the rows of head h of -exp(s_h - LSE_i) (dO_i . O_i), overwritten by each
 * Backward (never accumulated into); bitwise deterministic. A Backward with dSinks set needs sinks set too.
 * \param[in] desc   a live descriptor.
 * \param[in] dSinks FP32 `[heads]` in the backend's memory; NULL: the Backward does not compute it.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p dSinks is not 4-byte aligned.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionSinksGradient(flashAttnAttentionDescriptor_t desc, float *dSinks);

/**
 * \brief Reads where the gradient of the sinks goes.
 * \param[in]  desc   a live descriptor.
 * \param[out] dSinks receives the pointer (NULL = not computed).
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p dSinks is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionSinksGradient(flashAttnAttentionDescriptor_t desc,
                                                                   float **dSinks);

/**
 * \brief Asks for a bitwise deterministic backward (dQ accumulated in a fixed order).
 * \param[in] desc          a live descriptor.
 * \param[in] deterministic 0 or 1.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p deterministic is neither 0 nor 1.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionDeterministic(flashAttnAttentionDescriptor_t desc,
                                                                   int32_t deterministic);

/**
 * \brief Reads the deterministic flag.
 * \param[in]  desc          a live descriptor.
 * \param[out] deterministic receives 0 or 1.
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p deterministic is NULL.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionDeterministic(flashAttnAttentionDescriptor_t desc,
                                                                   int32_t *deterministic);

/** @} */

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup seq Sequence descriptor
 *
 * Optional argument of every attention operation (NULL = dense batch, every sequence of full length). Its arrays live
 * in the backend's memory (device for CUDA, host for HOST) and are read when an operation runs. The CUDA backend
 * cannot read them on the host without a synchronisation, so there their values are trusted: kernels clamp them to
 * the tensor bounds so that no access ever leaves a tensor, but wrong values give wrong results. The HOST backend
 * checks them and returns ::FLASHATTN_STATUS_BAD_PARAM.
 *  @{ */

/**
 * \brief Creates an empty sequence descriptor (dense batch).
 * \param[out] desc receives the descriptor.
 * \retval FLASHATTN_STATUS_SUCCESS created.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p desc is NULL.
 * \retval FLASHATTN_STATUS_ALLOC_FAILED out of host memory.
 */
FLASHATTN_API flashAttnStatus_t flashAttnCreateSeqDescriptor(flashAttnSeqDescriptor_t *desc);

/**
 * \brief Destroys a sequence descriptor.
 * \param[in] desc a descriptor, or NULL (nothing happens).
 * \retval FLASHATTN_STATUS_SUCCESS destroyed.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc was already destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnDestroySeqDescriptor(flashAttnSeqDescriptor_t desc);

/**
 * \brief Ragged (packed) batches: sequence b owns query tokens [cuSeqlensQ[b], cuSeqlensQ[b+1]) and key tokens
 *        [cuSeqlensK[b], cuSeqlensK[b+1]) of rank-3 tensors. Zero-length sequences are allowed.
 *
 * Chunked prefill over a paged KV cache (flashAttnSetSeqPaged()) takes a ragged Q with \p cuSeqlensK NULL: sequence
 * b's new tokens are its query tokens, and its keys are the first seqlensK[b] rows of its pages (the cached prefix and
 * then the chunk's own keys). An operation with \p cuSeqlensK NULL and no paged cache, or with both a paged cache and
 * \p cuSeqlensK, returns ::FLASHATTN_STATUS_BAD_PARAM.
 * \param[in] desc       a live descriptor.
 * \param[in] batch      number of sequences, >= 1.
 * \param[in] cuSeqlensQ int32 `[batch + 1]` prefix sums starting at 0, or NULL (with \p cuSeqlensK NULL) to leave
 *                       ragged mode.
 * \param[in] cuSeqlensK int32 `[batch + 1]` prefix sums starting at 0, or NULL for a ragged Q over a paged cache.
 * \param[in] maxSeqlenQ upper bound of the query lengths, >= 1 (host value, sizes the launch).
 * \param[in] maxSeqlenK upper bound of the key lengths, >= 1 (not used with a paged cache, whose capacity
 *                       maxPagesPerSeq * pageSize bounds them).
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM a count is out of range, or \p cuSeqlensQ is NULL and \p cuSeqlensK is not.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetSeqRagged(flashAttnSeqDescriptor_t desc, int64_t batch,
                                                      const int32_t *cuSeqlensQ, const int32_t *cuSeqlensK,
                                                      int64_t maxSeqlenQ, int64_t maxSeqlenK);

/**
 * \brief Reads the ragged setting.
 * \param[in]  desc       a live descriptor.
 * \param[out] batch      receives the batch (0 when not ragged); each output may be NULL.
 * \param[out] cuSeqlensQ receives the query prefix sums pointer.
 * \param[out] cuSeqlensK receives the key prefix sums pointer.
 * \param[out] maxSeqlenQ receives the query length bound.
 * \param[out] maxSeqlenK receives the key length bound.
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetSeqRagged(flashAttnSeqDescriptor_t desc, int64_t *batch,
                                                      const int32_t **cuSeqlensQ, const int32_t **cuSeqlensK,
                                                      int64_t *maxSeqlenQ, int64_t *maxSeqlenK);

/**
 * \brief Per-sequence used KV lengths for padded or paged caches: sequence b sees keys [0, seqlensK[b]).
 * \param[in] desc     a live descriptor.
 * \param[in] batch    number of sequences, >= 1.
 * \param[in] seqlensK int32 `[batch]`, each in [0, seqK of the cache], or NULL to clear.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM \p batch < 1 with a non-NULL array.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetSeqKvLengths(flashAttnSeqDescriptor_t desc, int64_t batch,
                                                         const int32_t *seqlensK);

/**
 * \brief Reads the per-sequence KV lengths.
 * \param[in]  desc     a live descriptor.
 * \param[out] batch    receives the batch (0 when unset); may be NULL.
 * \param[out] seqlensK receives the pointer; may be NULL.
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetSeqKvLengths(flashAttnSeqDescriptor_t desc, int64_t *batch,
                                                         const int32_t **seqlensK);

/**
 * \brief Paged KV cache: sequence b's key t lives in page blockTable[b * maxPagesPerSeq + t / pageSize], row
 *        t % pageSize, of K/V tensors `[numPages, pageSize, kvHeads, headDim]`. Needs per-sequence KV lengths.
 *
 * Any page size >= 1; pages may be shared and appear in any order. Sequence b sees keys [0, seqlensK[b]); rows past it
 * and pages past its last are never read (they may hold anything, NaN included), nor are table entries past its last
 * page. flashAttnForward() takes a paged cache with a dense Q `[batch, heads, seqQ, headDim]` or, for chunked
 * prefill, a ragged one (flashAttnSetSeqRagged() with cuSeqlensK NULL); flashAttnDecodeChunk() with a dense Q.
 * With ::FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT the sq_b new tokens of sequence b are its last sq_b keys: query i sees
 * keys [0, seqlensK[b] - sq_b + i], the whole cached prefix and the chunk up to itself. flashAttnBackward() takes no
 * paged cache (::FLASHATTN_STATUS_BAD_PARAM).
 * \param[in] desc           a live descriptor.
 * \param[in] batch          number of sequences, >= 1.
 * \param[in] blockTable     int32 `[batch, maxPagesPerSeq]` page ids, or NULL to clear.
 * \param[in] maxPagesPerSeq row length of \p blockTable, >= 1.
 * \retval FLASHATTN_STATUS_SUCCESS set.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 * \retval FLASHATTN_STATUS_BAD_PARAM a count is out of range with a non-NULL table.
 */
FLASHATTN_API flashAttnStatus_t flashAttnSetSeqPaged(flashAttnSeqDescriptor_t desc, int64_t batch,
                                                     const int32_t *blockTable, int64_t maxPagesPerSeq);

/**
 * \brief Reads the paged setting.
 * \param[in]  desc           a live descriptor.
 * \param[out] batch          receives the batch (0 when unset); may be NULL.
 * \param[out] blockTable     receives the table pointer; may be NULL.
 * \param[out] maxPagesPerSeq receives the row length; may be NULL.
 * \retval FLASHATTN_STATUS_SUCCESS read.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED \p desc is NULL or destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnGetSeqPaged(flashAttnSeqDescriptor_t desc, int64_t *batch,
                                                     const int32_t **blockTable, int64_t *maxPagesPerSeq);

/** @} */

/* ----------------------------------------------------------------------------------------------------------------- */
/** \defgroup ops Operations
 *
 * Common to all operations:
 * - Pointers are in the handle's memory (device for CUDA, host for HOST) and must be aligned to their element size;
 *   the workspace to 256 bytes. NULL is allowed only for optional outputs (LSE) and a zero-byte workspace.
 * - Outputs must not overlap inputs, the sequence descriptor's arrays or the ALiBi slopes, and the workspace (its
 *   first `...GetWorkspaceSize` bytes) must overlap none of them: ::FLASHATTN_STATUS_BAD_PARAM names the two.
 * - The workspace size returned by the `...GetWorkspaceSize` twin with the same arguments is exactly what the
 *   operation needs; less gives ::FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE, more is fine. Its contents on entry do
 *   not matter and need no clearing (a never-written workspace is fine); an operation may leave data in it (the
 *   decode leaves its merge counters at rest for the next call). One workspace must not serve two operations that
 *   can run at the same time (on different streams).
 * - Status values returned by every operation: ::FLASHATTN_STATUS_SUCCESS;
 *   ::FLASHATTN_STATUS_NOT_INITIALIZED (NULL, destroyed or unset handle or descriptor);
 *   ::FLASHATTN_STATUS_BAD_PARAM (shapes, types, strides, pointers or attributes invalid, the message says which);
 *   ::FLASHATTN_STATUS_NOT_SUPPORTED (valid but no kernel: see flashAttnCheckSupport());
 *   ::FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE; ::FLASHATTN_STATUS_EXECUTION_FAILED (a CUDA error at launch);
 *   ::FLASHATTN_STATUS_INTERNAL_ERROR.
 *  @{ */

/**
 * \brief Says, without launching, whether a configuration runs on this handle and what serves it.
 *
 * Takes the descriptors the operation would take; for ::FLASHATTN_OP_MERGE_STATES pass the partial O descriptor as
 * \p qDesc, the output descriptor as \p oDesc and NULL for \p kDesc and \p vDesc.
 * \param[in]  handle           a live handle.
 * \param[in]  operation        the operation.
 * \param[in]  attnDesc         attention descriptor (NULL = defaults; ignored for merge).
 * \param[in]  seqDesc          sequence descriptor or NULL.
 * \param[in]  qDesc            Q (or partial O for merge).
 * \param[in]  kDesc            K (NULL for merge).
 * \param[in]  vDesc            V (NULL for merge).
 * \param[in]  oDesc            O.
 * \param[out] description      receives a NUL-terminated text naming the kernel family, the tile, the accumulator
 *                              precision and the determinism; may be NULL when \p descriptionLen is 0.
 * \param[in]  descriptionLen   size of \p description in bytes.
 * \param[out] deterministic    receives 1 when repeated runs are bitwise identical; may be NULL.
 * \retval FLASHATTN_STATUS_SUCCESS the configuration runs.
 * \retval FLASHATTN_STATUS_NOT_SUPPORTED valid, but not served; the last-error message says why.
 * \retval FLASHATTN_STATUS_BAD_PARAM the configuration is invalid.
 * \retval FLASHATTN_STATUS_NOT_INITIALIZED a handle or descriptor is NULL or destroyed.
 */
FLASHATTN_API flashAttnStatus_t flashAttnCheckSupport(flashAttnHandle_t handle, flashAttnOperation_t operation,
                                                      flashAttnAttentionDescriptor_t attnDesc,
                                                      flashAttnSeqDescriptor_t seqDesc,
                                                      flashAttnTensorDescriptor_t qDesc,
                                                      flashAttnTensorDescriptor_t kDesc,
                                                      flashAttnTensorDescriptor_t vDesc,
                                                      flashAttnTensorDescriptor_t oDesc, char *description,
                                                      size_t descriptionLen, int32_t *deterministic);

/**
 * \brief Workspace bytes flashAttnForward() needs for these descriptors (the same arguments, less the pointers).
 * \param[in]  handle   a live handle.
 * \param[in]  attnDesc attention descriptor or NULL (defaults).
 * \param[in]  seqDesc  sequence descriptor or NULL.
 * \param[in]  qDesc    Q.
 * \param[in]  kDesc    K.
 * \param[in]  vDesc    V.
 * \param[in]  oDesc    O.
 * \param[in]  lseDesc  LSE or NULL.
 * \param[out] bytes    receives the size.
 * \retval FLASHATTN_STATUS_SUCCESS written. Other values as for the operation.
 */
FLASHATTN_API flashAttnStatus_t flashAttnForwardGetWorkspaceSize(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t lseDesc, size_t *bytes);

/**
 * \brief O = softmax(mask(softcap(scale * Q K^T) + alibi)) V, and optionally LSE.
 * \param[in]  handle         a live handle.
 * \param[in]  attnDesc       attention descriptor or NULL (defaults).
 * \param[in]  seqDesc        sequence descriptor or NULL (dense batch): ragged Q and K/V, per-sequence KV lengths of a
 *                            padded cache, or a paged KV cache (block table and KV lengths) under a dense Q or, for
 *                            chunked prefill, a ragged Q without cuSeqlensK (flashAttnSetSeqPaged()).
 * \param[in]  qDesc          Q descriptor.
 * \param[in]  q              Q data.
 * \param[in]  kDesc          K descriptor (`[numPages, pageSize, kvHeads, headDim]` for a paged cache).
 * \param[in]  k              K data.
 * \param[in]  vDesc          V descriptor (like K).
 * \param[in]  v              V data.
 * \param[in]  oDesc          O descriptor (same type as Q).
 * \param[out] o              O data.
 * \param[in]  lseDesc        LSE descriptor (FP32) or NULL.
 * \param[out] lse            LSE data, natural log; NULL when \p lseDesc is NULL.
 * \param[in]  workspace      scratch memory, or NULL when \p workspaceBytes is 0.
 * \param[in]  workspaceBytes size of \p workspace.
 * \return see the group description.
 */
FLASHATTN_API flashAttnStatus_t flashAttnForward(flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc,
                                                 flashAttnSeqDescriptor_t seqDesc, flashAttnTensorDescriptor_t qDesc,
                                                 const void *q, flashAttnTensorDescriptor_t kDesc, const void *k,
                                                 flashAttnTensorDescriptor_t vDesc, const void *v,
                                                 flashAttnTensorDescriptor_t oDesc, void *o,
                                                 flashAttnTensorDescriptor_t lseDesc, float *lse, void *workspace,
                                                 size_t workspaceBytes);

/**
 * \brief Workspace bytes flashAttnBackward() needs for these descriptors, with gradients in their tensors' strides.
 *
 * dO, dQ, dK and dV are sized as if they had the strides of O, Q, K and V (as frameworks allocate them); for other
 * gradient strides flashAttnBackwardGetWorkspaceSizeWithGradients() gives the exact size, and a workspace too small
 * for the call's gradients is ::FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE (the message names the query to use).
 * \param[in]  handle   a live handle.
 * \param[in]  attnDesc attention descriptor or NULL.
 * \param[in]  seqDesc  sequence descriptor or NULL.
 * \param[in]  qDesc    Q (dQ and dO have Q's shape).
 * \param[in]  kDesc    K (dK has K's shape).
 * \param[in]  vDesc    V (dV has V's shape).
 * \param[in]  oDesc    O.
 * \param[in]  lseDesc  LSE.
 * \param[out] bytes    receives the size.
 * \retval FLASHATTN_STATUS_SUCCESS written. Other values as for the operation.
 */
FLASHATTN_API flashAttnStatus_t flashAttnBackwardGetWorkspaceSize(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t lseDesc, size_t *bytes);

/**
 * \brief Workspace bytes flashAttnBackward() needs for exactly these descriptors, gradients included.
 *
 * flashAttnBackwardGetWorkspaceSize() takes no gradient descriptors and sizes dO, dQ, dK and dV as if they had the
 * strides of O, Q, K and V. Where they do not, and a gradient's batch, head or row stride is not a multiple of 16
 * bytes while its tensor's is, the CUDA backend stages that gradient through the workspace and needs more: this
 * query takes the operation's own descriptors and returns exactly what it needs (equal to the other query's answer
 * whenever the gradients have their tensors' strides).
 * \param[in]  handle   a live handle.
 * \param[in]  attnDesc attention descriptor or NULL.
 * \param[in]  seqDesc  sequence descriptor or NULL.
 * \param[in]  qDesc    Q.
 * \param[in]  kDesc    K.
 * \param[in]  vDesc    V.
 * \param[in]  oDesc    O.
 * \param[in]  dODesc   dO.
 * \param[in]  lseDesc  LSE.
 * \param[in]  dQDesc   dQ.
 * \param[in]  dKDesc   dK.
 * \param[in]  dVDesc   dV.
 * \param[out] bytes    receives the size.
 * \retval FLASHATTN_STATUS_SUCCESS written. Other values as for the operation.
 */
FLASHATTN_API flashAttnStatus_t flashAttnBackwardGetWorkspaceSizeWithGradients(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t dODesc, flashAttnTensorDescriptor_t lseDesc,
    flashAttnTensorDescriptor_t dQDesc, flashAttnTensorDescriptor_t dKDesc, flashAttnTensorDescriptor_t dVDesc,
    size_t *bytes);

/**
 * \brief dQ, dK, dV of flashAttnForward() given dO, recomputing P from Q, K and the saved LSE.
 *
 * dK and dV of a shared KV head are the sums over the query heads of its group. Rows with no visible key get zero
 * gradient. With the deterministic attribute the result is bitwise identical run to run.
 * \param[in]  handle         a live handle.
 * \param[in]  attnDesc       the attention descriptor used for the forward (or NULL).
 * \param[in]  seqDesc        the sequence descriptor used for the forward (or NULL).
 * \param[in]  qDesc          Q descriptor.
 * \param[in]  q              Q data.
 * \param[in]  kDesc          K descriptor.
 * \param[in]  k              K data.
 * \param[in]  vDesc          V descriptor.
 * \param[in]  v              V data.
 * \param[in]  oDesc          O descriptor.
 * \param[in]  o              O data written by the forward.
 * \param[in]  dODesc         dO descriptor (Q's shape and type, any strides).
 * \param[in]  dO             dO data.
 * \param[in]  lseDesc        LSE descriptor.
 * \param[in]  lse            LSE written by the forward.
 * \param[in]  dQDesc         dQ descriptor (Q's shape and type).
 * \param[out] dQ             dQ data.
 * \param[in]  dKDesc         dK descriptor (K's shape and type; no stride-0 broadcast).
 * \param[out] dK             dK data.
 * \param[in]  dVDesc         dV descriptor (V's shape and type; no stride-0 broadcast).
 * \param[out] dV             dV data.
 * \param[in]  workspace      scratch memory.
 * \param[in]  workspaceBytes size of \p workspace.
 * \return see the group description.
 */
FLASHATTN_API flashAttnStatus_t flashAttnBackward(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, const void *q, flashAttnTensorDescriptor_t kDesc, const void *k,
    flashAttnTensorDescriptor_t vDesc, const void *v, flashAttnTensorDescriptor_t oDesc, const void *o,
    flashAttnTensorDescriptor_t dODesc, const void *dO, flashAttnTensorDescriptor_t lseDesc, const float *lse,
    flashAttnTensorDescriptor_t dQDesc, void *dQ, flashAttnTensorDescriptor_t dKDesc, void *dK,
    flashAttnTensorDescriptor_t dVDesc, void *dV, void *workspace, size_t workspaceBytes);

/**
 * \brief Workspace bytes flashAttnDecodeChunk() needs for these descriptors and chunk count.
 * \param[in]  handle    a live handle.
 * \param[in]  attnDesc  attention descriptor or NULL.
 * \param[in]  seqDesc   sequence descriptor or NULL.
 * \param[in]  qDesc     Q `[batch, heads, seqQ, headDim]`.
 * \param[in]  kDesc     K cache, dense `[batch, kvHeads, seqK, headDim]` or paged `[numPages, pageSize, kvHeads,
 *                       headDim]`.
 * \param[in]  vDesc     V cache, like K.
 * \param[in]  oDesc     O.
 * \param[in]  lseDesc   LSE or NULL.
 * \param[in]  numChunks 0 = automatic, else the number of KV chunks per sequence.
 * \param[out] bytes     receives the size.
 * \retval FLASHATTN_STATUS_SUCCESS written. Other values as for the operation.
 */
FLASHATTN_API flashAttnStatus_t flashAttnDecodeChunkGetWorkspaceSize(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc, flashAttnTensorDescriptor_t vDesc,
    flashAttnTensorDescriptor_t oDesc, flashAttnTensorDescriptor_t lseDesc, int32_t numChunks, size_t *bytes);

/**
 * \brief Split-KV decode: a few query tokens per sequence against a contiguous or paged KV cache.
 *
 * The KV range [0, seqlensK[b]) of every sequence is cut into chunks processed in parallel; their partial results
 * are merged as flashAttnMergeStates() does. The result is bitwise the same for any launch with the same arguments.
 * More than 16 query tokens per sequence run as flashAttnForward() on the same cache (one pass over the keys, which
 * that many rows fill without a split), and so do V/O head dims other than Q/K's and head dims that are not multiples
 * of 8: the same O and LSE, \p numChunks has no effect, and the size query returns what that run needs
 * (flashAttnCheckSupport() names the forward kernel). The exception is absorbed-MLA decode, Q/K head dim 576 with V/O
 * 512 on sm90 (FP16/BF16, any query tokens, no softcap or ALiBi): a split decode of its own, where passing K's
 * pointer and strides for V (V is K's first 512 columns) reads each cache row once (docs/semantics.md).
 * \param[in]  handle         a live handle.
 * \param[in]  attnDesc       attention descriptor or NULL. Masks keep their definitions; with the query tokens being
 *                            the last ones of each sequence, ::FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT is the usual choice.
 * \param[in]  seqDesc        sequence descriptor: per-sequence KV lengths, and the block table for paged caches.
 * \param[in]  qDesc          Q descriptor.
 * \param[in]  q              Q data.
 * \param[in]  kDesc          K cache descriptor.
 * \param[in]  k              K cache data.
 * \param[in]  vDesc          V cache descriptor.
 * \param[in]  v              V cache data.
 * \param[in]  oDesc          O descriptor.
 * \param[out] o              O data.
 * \param[in]  lseDesc        LSE descriptor or NULL.
 * \param[out] lse            LSE data or NULL.
 * \param[in]  numChunks      0 = automatic, else >= 1.
 * \param[in]  workspace      scratch memory for the partial states and the merge's counters (any contents; on a
 *                            never-written workspace compute-sanitizer's initcheck reports the first call's reads
 *                            of the counters, which that call reads as empty: write the workspace once to silence
 *                            it).
 * \param[in]  workspaceBytes size of \p workspace.
 * \return see the group description.
 */
FLASHATTN_API flashAttnStatus_t flashAttnDecodeChunk(
    flashAttnHandle_t handle, flashAttnAttentionDescriptor_t attnDesc, flashAttnSeqDescriptor_t seqDesc,
    flashAttnTensorDescriptor_t qDesc, const void *q, flashAttnTensorDescriptor_t kDesc, const void *k,
    flashAttnTensorDescriptor_t vDesc, const void *v, flashAttnTensorDescriptor_t oDesc, void *o,
    flashAttnTensorDescriptor_t lseDesc, float *lse, int32_t numChunks, void *workspace, size_t workspaceBytes);

/**
 * \brief Workspace bytes flashAttnMergeStates() needs.
 * \param[in]  handle          a live handle.
 * \param[in]  partialODesc    partial O `[states, batch, heads, seqQ, headDimV]`, FP32.
 * \param[in]  partialLseDesc  partial LSE `[states, batch, heads, seqQ]`, FP32.
 * \param[in]  oDesc           O `[batch, heads, seqQ, headDimV]`.
 * \param[in]  lseDesc         LSE `[batch, heads, seqQ]` or NULL.
 * \param[out] bytes           receives the size.
 * \retval FLASHATTN_STATUS_SUCCESS written. Other values as for the operation.
 */
FLASHATTN_API flashAttnStatus_t flashAttnMergeStatesGetWorkspaceSize(flashAttnHandle_t handle,
                                                                     flashAttnTensorDescriptor_t partialODesc,
                                                                     flashAttnTensorDescriptor_t partialLseDesc,
                                                                     flashAttnTensorDescriptor_t oDesc,
                                                                     flashAttnTensorDescriptor_t lseDesc,
                                                                     size_t *bytes);

/**
 * \brief Merges partial attention states: O = sum_s w_s O_s with w_s = exp(lse_s - LSE), LSE = log sum_s exp(lse_s).
 *
 * A partial LSE of -inf is an empty state; a row whose states are all empty gives O = 0 and LSE = -inf.
 * \param[in]  handle          a live handle.
 * \param[in]  partialODesc    partial O descriptor.
 * \param[in]  partialO        partial O data (FP32).
 * \param[in]  partialLseDesc  partial LSE descriptor.
 * \param[in]  partialLse      partial LSE data (FP32, natural log).
 * \param[in]  oDesc           O descriptor (FP16, BF16 or FP32).
 * \param[out] o               O data.
 * \param[in]  lseDesc         LSE descriptor or NULL.
 * \param[out] lse             LSE data or NULL.
 * \param[in]  workspace       scratch memory.
 * \param[in]  workspaceBytes  size of \p workspace.
 * \return see the group description.
 */
FLASHATTN_API flashAttnStatus_t flashAttnMergeStates(flashAttnHandle_t handle,
                                                     flashAttnTensorDescriptor_t partialODesc, const float *partialO,
                                                     flashAttnTensorDescriptor_t partialLseDesc,
                                                     const float *partialLse, flashAttnTensorDescriptor_t oDesc,
                                                     void *o, flashAttnTensorDescriptor_t lseDesc, float *lse,
                                                     void *workspace, size_t workspaceBytes);

/** @} */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHATTN_FLASHATTN_H */
