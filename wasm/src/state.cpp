#include "state.h"

#include <cmath>
#include <cstring>

namespace tg {

std::string state_problem(const Model& model, const uint8_t* buf, int64_t n) {
  const int64_t P = model.param_count();
  const int64_t small = state_size(P, false), full = state_size(P, true);
  if (buf == nullptr) return "state buffer is null";
  if (n != small && n != full)
    return "state length mismatch: " + std::to_string(n) + " bytes, expected " +
           std::to_string(small) + " (step + weights) or " + std::to_string(full) +
           " (step + weights + AdamW m and v) for this config" +
           (n < small ? " - the buffer is truncated" : "");
  int32_t step;
  std::memcpy(&step, buf, 4);
  if (step < 0) return "step is negative (" + std::to_string(step) + ")";
  const int64_t blocks = n == full ? 3 : 1;
  static const char* const kBlock[3] = {"weights", "AdamW m", "AdamW v"};
  for (int64_t b = 0; b < blocks; b++)
    for (const TensorInfo& t : model.manifest()) {
      const uint8_t* base = buf + 4 + 4 * (b * P + t.offset);
      for (int64_t i = 0; i < t.numel; i++) {
        float x;
        std::memcpy(&x, base + 4 * i, 4);  // the buffer need not be 4-byte aligned
        if (!std::isfinite(x))
          return std::string("non-finite value (NaN or infinity) in ") + kBlock[b] + " of " +
                 t.name + " at element " + std::to_string(i);
        // v is a mean of squares: a resumed step would take the square root of a negative one
        if (b == 2 && x < 0)
          return std::string("negative value in AdamW v of ") + t.name + " at element " +
                 std::to_string(i) + ": v is a mean of squares";
      }
    }
  return "";
}

void import_state(Model& model, const uint8_t* buf, int64_t n) {
  const int64_t P = model.param_count();
  uint8_t* state = model.state_bytes();
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

}  // namespace tg
