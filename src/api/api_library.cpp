// SPDX-License-Identifier: BSD-3-Clause
// Version, status strings, the thread-local last error, and the handle.
#include <cstring>
#include <string>

#include "api/guard.hpp"
#include "core/backend.hpp"
#include "core/descriptors.hpp"

namespace flashattn {

namespace {
thread_local std::string lastErrorMessage;
}

void setLastError(const char *function, const std::string &message) {
  try {
    lastErrorMessage = std::string(function) + ": " + message;
  } catch (...) {
    // Out of memory while reporting: keep the previous message rather than fail the report.
  }
}

}  // namespace flashattn

using namespace flashattn;

extern "C" {

FLASHATTN_API int32_t flashAttnGetVersion(void) { return FLASHATTN_VERSION; }

FLASHATTN_API const char *flashAttnGetErrorString(flashAttnStatus_t status) {
  switch (rawEnum(status)) {
    case FLASHATTN_STATUS_SUCCESS: return "FLASHATTN_STATUS_SUCCESS";
    case FLASHATTN_STATUS_NOT_INITIALIZED: return "FLASHATTN_STATUS_NOT_INITIALIZED";
    case FLASHATTN_STATUS_BAD_PARAM: return "FLASHATTN_STATUS_BAD_PARAM";
    case FLASHATTN_STATUS_NOT_SUPPORTED: return "FLASHATTN_STATUS_NOT_SUPPORTED";
    case FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE: return "FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE";
    case FLASHATTN_STATUS_ALLOC_FAILED: return "FLASHATTN_STATUS_ALLOC_FAILED";
    case FLASHATTN_STATUS_ARCH_MISMATCH: return "FLASHATTN_STATUS_ARCH_MISMATCH";
    case FLASHATTN_STATUS_NO_DEVICE: return "FLASHATTN_STATUS_NO_DEVICE";
    case FLASHATTN_STATUS_EXECUTION_FAILED: return "FLASHATTN_STATUS_EXECUTION_FAILED";
    case FLASHATTN_STATUS_INTERNAL_ERROR: return "FLASHATTN_STATUS_INTERNAL_ERROR";
  }
  return "FLASHATTN_STATUS_UNKNOWN";
}

FLASHATTN_API size_t flashAttnGetLastErrorMessage(char *buf, size_t len) {
  const std::string &msg = lastErrorMessage;
  if (buf && len > 0) {
    const size_t n = msg.size() < len - 1 ? msg.size() : len - 1;
    std::memcpy(buf, msg.data(), n);
    buf[n] = '\0';
  }
  return msg.size();
}

FLASHATTN_API flashAttnStatus_t flashAttnCreate(flashAttnHandle_t *handle) {
  return flashAttnCreateWithBackend(handle, FLASHATTN_BACKEND_AUTO);
}

FLASHATTN_API flashAttnStatus_t flashAttnCreateWithBackend(flashAttnHandle_t *handle, flashAttnBackend_t backend) {
  return guarded("flashAttnCreateWithBackend", [&] {
    require(handle != nullptr, "handle (output pointer) is NULL");
    const int32_t kind = rawEnum(backend);
    if (kind != FLASHATTN_BACKEND_AUTO && kind != FLASHATTN_BACKEND_CUDA && kind != FLASHATTN_BACKEND_HOST)
      fail(FLASHATTN_STATUS_BAD_PARAM, "backend is ", kind, ": expected AUTO (0), CUDA (1) or HOST (2)");
    std::unique_ptr<Backend> impl;
    if (kind == FLASHATTN_BACKEND_HOST || (kind == FLASHATTN_BACKEND_AUTO && !cudaBackendAvailable()))
      impl = makeHostBackend();
    else
      impl = makeCudaBackend();
    flashAttnContext *ctx = createObject<flashAttnContext>();
    ctx->backend = std::move(impl);
    *handle = ctx;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnDestroy(flashAttnHandle_t handle) {
  return guarded("flashAttnDestroy", [&] {
    if (handle && !destroyObject(handle))
      fail(FLASHATTN_STATUS_NOT_INITIALIZED, "handle is not a live handle (destroyed twice, or never created)");
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetBackend(flashAttnHandle_t handle, flashAttnBackend_t *backend) {
  return guarded("flashAttnGetBackend", [&] {
    flashAttnContext &ctx = handleRef(handle);
    require(backend != nullptr, "backend (output pointer) is NULL");
    *backend = ctx.backend->kind();
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetStream(flashAttnHandle_t handle, struct CUstream_st *stream) {
  return guarded("flashAttnSetStream", [&] { handleRef(handle).backend->setStream(stream); });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetStream(flashAttnHandle_t handle, struct CUstream_st **stream) {
  return guarded("flashAttnGetStream", [&] {
    flashAttnContext &ctx = handleRef(handle);
    require(stream != nullptr, "stream (output pointer) is NULL");
    *stream = ctx.backend->stream();
  });
}

}  // extern "C"
