// SPDX-License-Identifier: BSD-3-Clause
#include "cuda/family.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/knobs.hpp"

namespace flashattn::cuda {
namespace {

// Filled by static registrars before main() (and before any handle exists), read-only afterwards.
std::vector<Family> &registry() {
  static std::vector<Family> families;
  return families;
}

}  // namespace

void registerFamily(const Family &family) {
  std::vector<Family> &families = registry();
  const auto at = std::upper_bound(families.begin(), families.end(), family,
                                   [](const Family &a, const Family &b) { return a.rank < b.rank; });
  families.insert(at, family);
}

const Family *findFamily(KernelId id) {
  for (const Family &f : registry())
    if (f.id == id) return &f;
  return nullptr;
}

bool portableOnly() {
  static const bool pinned = knobIs(Knob::Families, "portable");
  return pinned;
}

bool choose(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  std::string passedOver;  // why the families ranked before the chosen one were not used
  // On refusal: the portable family's reason first (the general rule), else the first; then every other family's,
  // so that an arch-specific family refusing one feature (softcap on the MLA decode) is named beside a portable
  // family that has no kernel of the width at all.
  std::string refusal;
  std::string refusalLabel;
  std::string others;
  bool portableRefused = false;
  for (const Family &f : registry()) {
    if (f.op != p.op || (!f.portable && portableOnly())) continue;
    std::string why;
    Plan candidate;
    const Verdict verdict = f.plan(dev, p, &candidate, &why);
    if (verdict == Verdict::NotForThis) continue;
    if (verdict == Verdict::Served) {
      candidate.kernel = f.id;
      candidate.description += passedOver;
      *plan = std::move(candidate);
      return true;
    }
    passedOver += concat("; ", f.label, " not used: ", why);
    if (refusal.empty() || (f.portable && !portableRefused)) {
      if (!refusal.empty()) others = concat("; ", refusalLabel, refusal, others);
      refusal = why;
      refusalLabel = concat(f.label, ": ");
    } else {
      others += concat("; ", f.label, ": ", why);
    }
    portableRefused = portableRefused || f.portable;
  }
  if (whyNot != nullptr)
    *whyNot = refusal.empty() ? concat("no CUDA kernel of this build serves this operation on sm", dev.arch())
                              : refusal + others;
  return false;
}

}  // namespace flashattn::cuda
