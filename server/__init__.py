"""The playground's server: a Starlette app that serves site/ with the headers in `_headers`, and a
CLI that runs it (`serve`) or renders it into a static dist/ for any static host (`build`)."""
