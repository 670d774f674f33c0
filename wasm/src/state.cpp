#include "state.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace tg {

namespace {

// Empty if buf (n bytes) is i32 step | tensors x count | [m | v] over `tensors`, else why not.
std::string layout_problem(const std::vector<TensorInfo>& tensors, int64_t count,
                           const uint8_t* buf, int64_t n, const char* what, const char* values) {
  const int64_t small = state_size(count, false), full = state_size(count, true);
  if (buf == nullptr) return std::string(what) + " buffer is null";
  if (n != small && n != full)
    return std::string(what) + " length mismatch: " + std::to_string(n) + " bytes, expected " +
           std::to_string(small) + " (step + " + values + ") or " + std::to_string(full) +
           " (step + " + values + " + AdamW m and v) for this config" +
           (n < small ? " - the buffer is truncated" : "");
  int32_t step;
  std::memcpy(&step, buf, 4);
  if (step < 0) return "step is negative (" + std::to_string(step) + ")";
  const int64_t blocks = n == full ? 3 : 1;
  const char* const block_name[3] = {values, "AdamW m", "AdamW v"};
  for (int64_t b = 0; b < blocks; b++)
    for (const TensorInfo& t : tensors) {
      const uint8_t* base = buf + 4 + 4 * (b * count + t.offset);
      for (int64_t i = 0; i < t.numel; i++) {
        float x;
        std::memcpy(&x, base + 4 * i, 4);  // the buffer need not be 4-byte aligned
        if (!std::isfinite(x))
          return std::string("non-finite value (NaN or infinity) in ") + block_name[b] + " of " +
                 t.name + " at element " + std::to_string(i);
        // v is a mean of squares: a resumed step would take the square root of a negative one
        if (b == 2 && x < 0)
          return std::string("negative value in AdamW v of ") + t.name + " at element " +
                 std::to_string(i) + ": v is a mean of squares";
      }
    }
  return "";
}

}  // namespace

std::string state_problem(const Model& model, const uint8_t* buf, int64_t n) {
  return layout_problem(model.manifest(), model.param_count(), buf, n, "state", "weights");
}

void import_state(Model& model, const uint8_t* buf, int64_t n) {
  const int64_t P = model.param_count();
  uint8_t* state = model.state_bytes();
  if (model.lora()) {
    std::memcpy(state, buf, static_cast<size_t>(state_size(P, false)));  // the frozen base
    model.lora_merged = false;
    return;
  }
  std::memcpy(state, buf, static_cast<size_t>(n));
  if (n == state_size(P, true)) {
    model.adam_steps = model.step();
  } else {
    std::memset(model.moment_m(), 0, static_cast<size_t>(P) * 4);
    std::memset(model.moment_v(), 0, static_cast<size_t>(P) * 4);
    model.adam_steps = 0;
  }
}

void export_state(const Model& model, uint8_t* out, bool with_moments) {
  std::memcpy(out, model.state_bytes(),
              static_cast<size_t>(state_size(model.param_count(), with_moments)));
}

std::string lora_state_problem(const Model& model, const uint8_t* buf, int64_t n) {
  return layout_problem(model.lora_manifest(), model.lora_param_count(), buf, n, "adapter state",
                        "adapters");
}

void import_lora_state(Model& model, const uint8_t* buf, int64_t n) {
  const int64_t Q = model.lora_param_count();
  std::memcpy(model.lora_state_bytes(), buf, static_cast<size_t>(n));
  if (n == state_size(Q, true)) {
    model.lora_adam_steps = model.lora_step();
  } else {
    float* m = model.lora_weights() + Q;
    std::memset(m, 0, static_cast<size_t>(2 * Q) * 4);  // m and v
    model.lora_adam_steps = 0;
  }
}

void export_lora_state(const Model& model, uint8_t* out, bool with_moments) {
  std::memcpy(out, model.lora_state_bytes(),
              static_cast<size_t>(state_size(model.lora_param_count(), with_moments)));
}

}  // namespace tg
