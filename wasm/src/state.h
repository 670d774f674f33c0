// Import/export of the .tinygpt state (docs/format.md): i32 step | weights | [m | v], manifest
// order, and of a LoRA model's adapter state, laid out the same way over the adapter manifest:
// i32 step | adapters | [m | v] (docs/format.md, "LoRA adapter file"). The arena holds exactly
// these layouts, so every direction is one validated copy.
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

// Copies a validated state in. Without moments: m = v = 0 and AdamW bias correction restarts. A
// LoRA model takes the step and weights alone (it has no base moments) and is unmerged after.
void import_state(Model& model, const uint8_t* buf, int64_t n);

// Writes state_size(P, with_moments) bytes to out (a LoRA model: without moments only).
void export_state(const Model& model, uint8_t* out, bool with_moments);

// The same three for the adapter state of a LoRA model (Q = model.lora_param_count()).
std::string lora_state_problem(const Model& model, const uint8_t* buf, int64_t n);
void import_lora_state(Model& model, const uint8_t* buf, int64_t n);
void export_lora_state(const Model& model, uint8_t* out, bool with_moments);

}  // namespace tg
