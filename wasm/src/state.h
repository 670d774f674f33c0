// Import/export of the .tinygpt state (docs/format.md): i32 step | weights | [m | v], manifest
// order. The arena holds exactly this layout, so both directions are one validated copy.
#pragma once
#include <cstdint>
#include <string>

#include "model.h"

namespace tg {

inline int64_t state_size(int64_t P, bool with_moments) {
  return 4 + 4 * P * (with_moments ? 3 : 1);
}

// Empty if buf (n bytes) is a state this model can load, else what is wrong with it.
std::string state_problem(const Model& model, const uint8_t* buf, int64_t n);

// Copies a validated state in. Without moments: m = v = 0 and AdamW bias correction restarts.
void import_state(Model& model, const uint8_t* buf, int64_t n);

// Writes state_size(P, with_moments) bytes to out.
void export_state(const Model& model, uint8_t* out, bool with_moments);

}  // namespace tg
