// GELU in GPT-2's tanh form, as WGSL functions for the matrix products' epilogues: fc_in's forward
// writes h and gelu(h) in one pass, and fc_out's input gradient is multiplied by gelu'(h) as it is
// stored (wasm/src/gelu.h's gelu_forward and gelu_backward, with no dispatch of their own).
export const GELU_FNS = /* wgsl */ `
const GELU_S = 0.7978845608028654; // sqrt(2/pi)
// clamped: tanh(±10) is ±1 in f32 already, and some tanh implementations overflow past that
fn gelu_tanh_arg(x: f32) -> f32 { return clamp(GELU_S * (x + 0.044715 * x * x * x), -10.0, 10.0); }
fn gelu(x: f32) -> f32 { return 0.5 * x * (1.0 + tanh(gelu_tanh_arg(x))); }
// d gelu(x) / dx
fn gelu_grad(x: f32) -> f32 {
  let t = tanh(gelu_tanh_arg(x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_S * (1.0 + 3.0 * 0.044715 * x * x);
}
`;
