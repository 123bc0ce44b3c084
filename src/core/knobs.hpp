// SPDX-License-Identifier: BSD-3-Clause
// Run-time knobs (environment variables), registered in knobs.def. A knob marked "read once" is read at its first use
// and keeps that value for the life of the process, so a plan never changes under a running program.
#pragma once

#include <cstddef>

namespace flashattn {

enum class Knob : int {
#define FLASHATTN_KNOB(id, variable, once, doc) id,
#include "core/knobs.def"
#undef FLASHATTN_KNOB
  Count
};

struct KnobInfo {
  const char *variable;
  bool readOnce;
  const char *doc;
};

const KnobInfo &knobInfo(Knob knob);

// The knob's value, or nullptr when unset (or empty). The pointer stays valid for the life of the process for a
// read-once knob; for the others until the next call that reads the same knob on this thread.
const char *knobValue(Knob knob);

// Whether the knob's value equals `text` (false when unset).
bool knobIs(Knob knob, const char *text);

}  // namespace flashattn
