"""Playwright tests of the playground page against the real server (a package so that its conftest
does not clash with tests/conftest.py when both directories run in one pytest session)."""
