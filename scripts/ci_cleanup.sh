#!/usr/bin/env bash
# Cleanup after a CI build (the Jenkins job's post blocks; also usable by hand): stops any
# tritonserver that outlived its run and was serving from this checkout or from the stage
# cache (an aborted build, a killed agent), and removes stage work dirs older than a day
# from the cache's tmp/ (a run killed mid-stage leaves its work dir; a live one is younger).
set -uo pipefail
cd "$(dirname "$0")/.."
cache=$(realpath -m "${DEPLOY_CACHE_DIR:-.deploy-cache}")
here=$(pwd -P)
stray=()
for pid in $(pgrep -u "$(id -u)" -f tritonserver || true); do
    cmdline=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || continue
    case "$cmdline" in
        *"--model-repository=$cache/"*|*"--model-repository=$here/"*) stray+=("$pid") ;;
    esac
done
if [ ${#stray[@]} -gt 0 ]; then
    echo "stopping stray tritonserver(s): ${stray[*]}"
    kill -TERM "${stray[@]}" 2>/dev/null
    sleep 5
    kill -KILL "${stray[@]}" 2>/dev/null
fi
if [ -d "$cache/tmp" ]; then
    find "$cache/tmp" -mindepth 1 -maxdepth 1 -mmin +1440 -exec rm -rf {} +
fi
exit 0
