// SPDX-License-Identifier: BSD-3-Clause
#include "core/knobs.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace flashattn {
namespace {

constexpr KnobInfo kKnobs[] = {
#define FLASHATTN_KNOB(id, variable, once, doc) {variable, once, doc},
#include "core/knobs.def"
#undef FLASHATTN_KNOB
};
static_assert(sizeof(kKnobs) / sizeof(kKnobs[0]) == std::size_t(Knob::Count), "knobs.def and the Knob enum agree");

struct OnceValues {
  std::once_flag read[std::size_t(Knob::Count)];
  std::string value[std::size_t(Knob::Count)];
  bool set[std::size_t(Knob::Count)] = {};
};

OnceValues &onceValues() {
  static OnceValues values;
  return values;
}

}  // namespace

const KnobInfo &knobInfo(Knob knob) { return kKnobs[std::size_t(knob)]; }

const char *knobValue(Knob knob) {
  const std::size_t i = std::size_t(knob);
  if (!kKnobs[i].readOnce) {
    thread_local std::string current;
    const char *env = std::getenv(kKnobs[i].variable);
    if (env == nullptr || *env == '\0') return nullptr;
    current = env;
    return current.c_str();
  }
  OnceValues &v = onceValues();
  std::call_once(v.read[i], [&] {
    const char *env = std::getenv(kKnobs[i].variable);
    if (env != nullptr && *env != '\0') {
      v.value[i] = env;
      v.set[i] = true;
    }
  });
  return v.set[i] ? v.value[i].c_str() : nullptr;
}

bool knobIs(Knob knob, const char *text) {
  const char *value = knobValue(knob);
  return value != nullptr && std::strcmp(value, text) == 0;
}

}  // namespace flashattn
