#!/usr/bin/env bash
# System tools the test suite drives: Chromium (headless screenshot of the run report),
# Groovy and a JDK (the Jenkinsfile dry run). Installed with apt-get where missing and
# where we may (root, or password-less sudo); otherwise says what to install, and the
# tests that need them are skipped with that reason.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1 || missing+=(chromium)
command -v groovy >/dev/null 2>&1 || missing+=(groovy)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "not installed: ${missing[*]} (apt-get install ${missing[*]}); the tests that need them will be skipped" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get: install ${missing[*]} yourself; the tests that need them will be skipped" >&2
    exit 0
fi
# sudo resets the environment: DEBIAN_FRONTEND goes through env.
if "${sudo[@]}" apt-get update -qq \
    && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
    echo "installed: ${missing[*]}"
else
    echo "could not install ${missing[*]}; the tests that need them will be skipped" >&2
fi
