// SPDX-License-Identifier: BSD-3-Clause
// Which kernel instances this build compiled, for tests that need a particular one. A build may shrink the instance
// set (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS, an FLASHATTN_CUDA_ARCHITECTURES list without sm90); a test that needs an
// instance the build left out skips, saying which, instead of failing. The answer comes from the same X-macro lists
// that src/cuda/generate.py writes into the build tree and every family's dispatch table is made from
// (<build>/generated/include/cuda/generated/<family>_instances.inc), so tests and library cannot disagree on it; a
// full build has every instance, and every such check then runs.
//
// CUDA builds only: tests/common/CMakeLists.txt puts the lists on the include path and defines
// FLASHATTN_TEST_INSTANCE_LISTS. Without it (a HOST-only build) every list is empty.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "flashattn/flashattn.h"
#include "test_support.hpp"

namespace fa_test {

// The kernel families as src/cuda/generate.py names them; the *Sm90 ones are the wgmma families (sm_90a code, built
// when FLASHATTN_CUDA_ARCHITECTURES has an sm90 entry).
enum class Family { Forward, Backward, Decode, ForwardSm90, BackwardSm90, DecodeSm90 };

struct BuiltInstance {
  flashAttnDataType_t dtype;
  int64_t headDim, headDimV;  // one instance's Q/K and V/O head dims (equal unless compiled for the pair)
};

namespace built_lists {
// Each list ends with a terminator (headDim 0), which keeps it non-empty in a build without the family.
#define FLASHATTN_INSTANCE(DTYPE, CTYPE, HEADDIM, HEADDIM_V) {FLASHATTN_DATA_##DTYPE, HEADDIM, HEADDIM_V},
#ifdef FLASHATTN_TEST_INSTANCE_LISTS
inline constexpr BuiltInstance kForward[] = {
#include "cuda/generated/forward_instances.inc"
    {FLASHATTN_DATA_FP32, 0, 0}};
inline constexpr BuiltInstance kBackward[] = {
#include "cuda/generated/backward_instances.inc"
    {FLASHATTN_DATA_FP32, 0, 0}};
inline constexpr BuiltInstance kDecode[] = {
#include "cuda/generated/decode_instances.inc"
    {FLASHATTN_DATA_FP32, 0, 0}};
inline constexpr BuiltInstance kForwardSm90[] = {
#include "cuda/generated/forward_sm90_instances.inc"
    {FLASHATTN_DATA_FP32, 0, 0}};
inline constexpr BuiltInstance kBackwardSm90[] = {
#include "cuda/generated/backward_sm90_instances.inc"
    {FLASHATTN_DATA_FP32, 0, 0}};
inline constexpr BuiltInstance kDecodeSm90[] = {
#include "cuda/generated/decode_sm90_instances.inc"
    {FLASHATTN_DATA_FP32, 0, 0}};
#else
inline constexpr BuiltInstance kNone[] = {{FLASHATTN_DATA_FP32, 0, 0}};
inline constexpr const BuiltInstance *kForward = kNone, *kBackward = kNone, *kDecode = kNone, *kForwardSm90 = kNone,
                                     *kBackwardSm90 = kNone, *kDecodeSm90 = kNone;
#endif
#undef FLASHATTN_INSTANCE
}  // namespace built_lists

inline const BuiltInstance *builtInstances(Family f) {
  switch (f) {
    case Family::Forward: return built_lists::kForward;
    case Family::Backward: return built_lists::kBackward;
    case Family::Decode: return built_lists::kDecode;
    case Family::ForwardSm90: return built_lists::kForwardSm90;
    case Family::BackwardSm90: return built_lists::kBackwardSm90;
    case Family::DecodeSm90: return built_lists::kDecodeSm90;
  }
  return built_lists::kForward;  // unreachable
}

inline const char *familyName(Family f) {
  switch (f) {
    case Family::Forward: return "forward";
    case Family::Backward: return "backward";
    case Family::Decode: return "decode";
    case Family::ForwardSm90: return "forward_sm90";
    case Family::BackwardSm90: return "backward_sm90";
    case Family::DecodeSm90: return "decode_sm90";
  }
  return "?";
}

// Whether the family has the instance of exactly these head dims (headDimV 0: the same as headDim) for `t`.
inline bool builtInstance(Family f, flashAttnDataType_t t, int64_t headDim, int64_t headDimV = 0) {
  if (headDimV == 0) headDimV = headDim;
  for (const BuiltInstance *i = builtInstances(f); i->headDim != 0; ++i)
    if (i->dtype == t && i->headDim == headDim && i->headDimV == headDimV) return true;
  return false;
}

// Whether the family has an instance of one head dim at least as wide as both, on which the portable families run
// narrower head dims zero-padded (src/cuda/instances.hpp, InstanceList::paddedInstanceFor).
inline bool builtAtLeast(Family f, flashAttnDataType_t t, int64_t headDim, int64_t headDimV = 0) {
  const int64_t width = headDimV > headDim ? headDimV : headDim;
  for (const BuiltInstance *i = builtInstances(f); i->headDim != 0; ++i)
    if (i->dtype == t && i->headDim == i->headDimV && i->headDim >= width) return true;
  return false;
}

// Whether the family has any instance for `t`.
inline bool builtDtype(Family f, flashAttnDataType_t t) {
  for (const BuiltInstance *i = builtInstances(f); i->headDim != 0; ++i)
    if (i->dtype == t) return true;
  return false;
}

constexpr const char *kNotInThisBuild = "not in this build (FLASHATTN_DTYPES/FLASHATTN_HEAD_DIMS)";

// "the backward_sm90 bf16 d192v128 instance is not in this build (...)", or "" where it is.
inline std::string notBuilt(Family f, flashAttnDataType_t t, int64_t headDim, int64_t headDimV = 0) {
  if (builtInstance(f, t, headDim, headDimV)) return "";
  const bool pair = headDimV != 0 && headDimV != headDim;
  return std::string("the ") + familyName(f) + " " + typeName(t) + " d" + std::to_string(headDim) +
         (pair ? "v" + std::to_string(headDimV) : "") + " instance is " + kNotInThisBuild;
}

// "no forward fp16 instance of head dim 64 or wider: not in this build (...)", or "" where there is one.
inline std::string notBuiltAtLeast(Family f, flashAttnDataType_t t, int64_t headDim, int64_t headDimV = 0) {
  if (builtAtLeast(f, t, headDim, headDimV)) return "";
  const int64_t width = headDimV > headDim ? headDimV : headDim;
  return std::string("no ") + familyName(f) + " " + typeName(t) + " instance of head dim " + std::to_string(width) +
         " or wider: " + kNotInThisBuild;
}

// Leaves out one part of a test because `missing` (notBuilt's text) is not in this build: the test goes on with the
// rest and passes or fails on it; the part left out is printed, not reported as a skip (a test whose every check
// needs the instance skips as a whole: SKIP_UNLESS_BUILT below).
inline void leaveOutPart(const std::string &missing) {
  const ::testing::TestInfo *test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[ LEFT OUT ] %s.%s, in part: %s\n", test ? test->test_suite_name() : "?", test ? test->name() : "?",
              missing.c_str());
}

// For a part of a test: true where the instance is built; else prints the part as left out and returns false.
inline bool partBuilt(Family f, flashAttnDataType_t t, int64_t headDim, int64_t headDimV = 0) {
  const std::string missing = notBuilt(f, t, headDim, headDimV);
  if (!missing.empty()) leaveOutPart(missing);
  return missing.empty();
}
inline bool partBuiltAtLeast(Family f, flashAttnDataType_t t, int64_t headDim, int64_t headDimV = 0) {
  const std::string missing = notBuiltAtLeast(f, t, headDim, headDimV);
  if (!missing.empty()) leaveOutPart(missing);
  return missing.empty();
}

}  // namespace fa_test

// Skips the whole test where `missing` (notBuilt's or notBuiltAtLeast's text, or a suite's own from them) is not ""
// (gtest's GTEST_SKIP: the test returns there).
#define SKIP_IF_NOT_BUILT(missing)                                          \
  if (const std::string fa_missing_ = (missing); fa_missing_.empty()) { \
  } else                                                                    \
    GTEST_SKIP() << fa_missing_
// Skips the whole test unless this build compiled the instance: SKIP_UNLESS_BUILT(family, dtype, headDim[, headDimV])
// for exactly those head dims, SKIP_UNLESS_BUILT_AT_LEAST for one at least as wide (where a portable family pads).
#define SKIP_UNLESS_BUILT(...) SKIP_IF_NOT_BUILT(::fa_test::notBuilt(__VA_ARGS__))
#define SKIP_UNLESS_BUILT_AT_LEAST(...) SKIP_IF_NOT_BUILT(::fa_test::notBuiltAtLeast(__VA_ARGS__))
