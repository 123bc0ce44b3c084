// SPDX-License-Identifier: BSD-3-Clause
#include "core/descriptors.hpp"

#include <mutex>
#include <unordered_set>

#include "core/error.hpp"

namespace flashattn {

namespace {

// One set of live addresses per object kind, so a tensor descriptor passed as a handle is not taken for one.
struct Registry {
  std::mutex mutex;
  std::unordered_set<const void *> live[4];
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed: handles may be destroyed from static destructors of users
  return *r;
}

template <typename T>
constexpr int tagOf();
template <>
constexpr int tagOf<flashAttnContext>() { return 0; }
template <>
constexpr int tagOf<flashAttnTensorStruct>() { return 1; }
template <>
constexpr int tagOf<flashAttnAttentionStruct>() { return 2; }
template <>
constexpr int tagOf<flashAttnSeqStruct>() { return 3; }

}  // namespace

template <typename T>
T *createObject() {
  auto object = std::make_unique<T>();
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live[tagOf<T>()].insert(object.get());
  return object.release();
}

template <typename T>
bool destroyObject(T *object) {
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.live[tagOf<T>()].erase(object) == 0) return false;
  }
  delete object;
  return true;
}

template <typename T>
bool isLive(const T *object) {
  if (!object) return false;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.live[tagOf<T>()].count(object) != 0;
}

#define FLASHATTN_INSTANTIATE_OBJECT(T) \
  template T *createObject<T>();        \
  template bool destroyObject<T>(T *);  \
  template bool isLive<T>(const T *);
FLASHATTN_INSTANTIATE_OBJECT(flashAttnContext)
FLASHATTN_INSTANTIATE_OBJECT(flashAttnTensorStruct)
FLASHATTN_INSTANTIATE_OBJECT(flashAttnAttentionStruct)
FLASHATTN_INSTANTIATE_OBJECT(flashAttnSeqStruct)
#undef FLASHATTN_INSTANTIATE_OBJECT

flashAttnContext &handleRef(flashAttnHandle_t h, const char *argName) {
  if (!h) fail(FLASHATTN_STATUS_NOT_INITIALIZED, argName, " is NULL");
  if (!isLive(h)) fail(FLASHATTN_STATUS_NOT_INITIALIZED, argName, " is not a live handle (destroyed or never created)");
  return *h;
}

const flashAttnTensorStruct &tensorRef(flashAttnTensorDescriptor_t d, const char *argName) {
  if (!d) fail(FLASHATTN_STATUS_NOT_INITIALIZED, argName, " descriptor is NULL");
  if (!isLive(d))
    fail(FLASHATTN_STATUS_NOT_INITIALIZED, argName, " descriptor is not a live tensor descriptor (destroyed or never created)");
  if (!d->isSet) fail(FLASHATTN_STATUS_NOT_INITIALIZED, argName, " descriptor was never set (flashAttnSetTensorDescriptor)");
  return *d;
}

const flashAttnTensorStruct *optionalTensor(flashAttnTensorDescriptor_t d, const char *argName) {
  return d ? &tensorRef(d, argName) : nullptr;
}

const flashAttnAttentionStruct *optionalAttention(flashAttnAttentionDescriptor_t d) {
  if (d && !isLive(d))
    fail(FLASHATTN_STATUS_NOT_INITIALIZED, "attnDesc is not a live attention descriptor (destroyed or never created)");
  return d;
}

const flashAttnSeqStruct *optionalSeq(flashAttnSeqDescriptor_t d) {
  if (d && !isLive(d))
    fail(FLASHATTN_STATUS_NOT_INITIALIZED, "seqDesc is not a live sequence descriptor (destroyed or never created)");
  return d;
}

}  // namespace flashattn
