// The C boundary: every entry point runs its body through guarded(), which turns any exception into a status and the
// thread's last-error message ("flashAttnForward: K has 6 heads, Q has 8: ..."). Nothing escapes into C.
#pragma once

#include <string>

#include "flashattn/flashattn.h"

namespace flashattn {

void setLastError(const char *function, const std::string &message);

template <typename Body>
flashAttnStatus_t guarded(const char *function, Body &&body) noexcept;

}  // namespace flashattn

#include "api/guard_impl.hpp"
