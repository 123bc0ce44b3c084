// SPDX-License-Identifier: BSD-3-Clause
// The bad-input catalogue on a HOST handle: buffers in host memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "bad_input_catalogue.hpp"

namespace {

class HostMemory final : public fa_bad::Memory {
 public:
  void *allocate(std::size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment.
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void *ptr) override { std::free(ptr); }
  void upload(void *dst, const void *src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void *dst, const void *src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void fill(void *dst, uint8_t pattern, std::size_t bytes) override { std::memset(dst, pattern, bytes); }
  bool callerErrorStateClean() override { return true; }
  void clearCallerErrorState() override {}
};

}  // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  HostMemory memory;
  fa_bad::setTarget({FLASHATTN_BACKEND_HOST, "HOST", &memory});
  const int result = RUN_ALL_TESTS();
  fa_bad::printCaseCount();
  return result;
}
