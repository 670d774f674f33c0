// `make lint` for JavaScript: ESLint's recommended rules (undefined names, unused variables,
// unreachable code...) over the page, the worker and engines, the WGSL trainer and the test drivers.
// Formatting is left to review: a formatter would rewrite the hand-aligned WGSL templates.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["build/**", "dist/**", "site/static/wasm/**", "**/node_modules/**", "*.egg-info/**"] },
  js.configs.recommended,
  {
    files: ["**/*.js", "**/*.mjs"],
    languageOptions: {
      ecmaVersion: 2024,
      sourceType: "module",
      // one codebase runs in pages, workers and Node (tests, benchmarks)
      globals: { ...globals.browser, ...globals.worker, ...globals.node },
    },
  },
];
