#!/usr/bin/env bash
# Creates .venv with deploy and everything its stages and tests use.
# Idempotent: a second call only checks that the pinned packages are installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[all,dev]'
# TensorRT's type stubs for mypy (TensorRT itself cannot be installed here).
.venv/bin/python scripts/trt_stubs.py
# Some machines set PYTHONDONTWRITEBYTECODE; precompiling keeps `deploy` start-up fast.
.venv/bin/python -m compileall -q pipeline stages >/dev/null
echo "setup ok: $(.venv/bin/deploy --help >/dev/null && echo 'deploy CLI ready')"
