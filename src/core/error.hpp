// SPDX-License-Identifier: BSD-3-Clause
// Failures inside the library travel as flashattn::Error and become a status plus the thread's last-error message at
// the C boundary (src/api/guard.hpp). Nothing else may cross that boundary.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "flashattn/flashattn.h"

namespace flashattn {

class Error : public std::runtime_error {
 public:
  Error(flashAttnStatus_t status, const std::string &message) : std::runtime_error(message), status_(status) {}
  flashAttnStatus_t status() const noexcept { return status_; }

 private:
  flashAttnStatus_t status_;
};

template <typename... Args>
std::string concat(Args &&...args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// fail(FLASHATTN_STATUS_BAD_PARAM, "K has ", k, " heads") throws with the message built from the pieces.
template <typename... Args>
[[noreturn]] void fail(flashAttnStatus_t status, Args &&...args) {
  throw Error(status, concat(std::forward<Args>(args)...));
}

template <typename... Args>
void require(bool condition, Args &&...args) {
  if (!condition) fail(FLASHATTN_STATUS_BAD_PARAM, std::forward<Args>(args)...);
}

}  // namespace flashattn
