"""Helpers the tests share: drivers for the native library, the WebAssembly builds and the browser.

pytest puts `tests/` on the import path (pyproject.toml), so tests import them as `support.<module>`.
"""
