// SPDX-License-Identifier: BSD-3-Clause
// The C boundary: every entry point runs its body through guarded(), which turns any exception into a status and the
// thread's last-error message ("flashAttnForward: K has 6 heads, Q has 8: ..."). Nothing escapes into C.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "flashattn/flashattn.h"

namespace flashattn {

// A C caller may pass any int as an enum argument; in C++ reading an enum object outside its value range is undefined,
// so entry points read the argument's bytes as int32_t and compare those.
template <typename Enum>
int32_t rawEnum(const Enum &value) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "public enums are int-sized");
  int32_t raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

void setLastError(const char *function, const std::string &message);

template <typename Body>
flashAttnStatus_t guarded(const char *function, Body &&body) noexcept;

}  // namespace flashattn

#include "api/guard_impl.hpp"
