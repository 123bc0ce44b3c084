// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <exception>
#include <new>

#include "core/error.hpp"

namespace flashattn {

template <typename Body>
flashAttnStatus_t guarded(const char *function, Body &&body) noexcept {
  try {
    body();
    return FLASHATTN_STATUS_SUCCESS;
  } catch (const Error &e) {
    setLastError(function, e.what());
    return e.status();
  } catch (const std::bad_alloc &) {
    setLastError(function, "out of host memory");
    return FLASHATTN_STATUS_ALLOC_FAILED;
  } catch (const std::exception &e) {
    setLastError(function, std::string("internal error: ") + e.what());
    return FLASHATTN_STATUS_INTERNAL_ERROR;
  } catch (...) {
    setLastError(function, "internal error: unknown exception");
    return FLASHATTN_STATUS_INTERNAL_ERROR;
  }
}

}  // namespace flashattn
