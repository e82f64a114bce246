#!/usr/bin/env bash
# Cleanup after a CI build (the Jenkins job's post blocks; also usable by hand):
#   scripts/ci_cleanup.sh [CHECKOUT]      (default: the checkout this script is in)
# Stops any tritonserver of ours that outlived its run (an aborted build, a killed agent):
# deploy starts its servers in its working directory, so those whose working directory is
# CHECKOUT belong to this workspace, and a matrix cell or another job in another workspace
# is left alone, even when it shares the stage cache. Then removes stage work dirs older
# than a day from the cache's tmp/ (a run killed mid-stage leaves its work dir behind;
# a live stage's is younger than the job's timeouts).
set -uo pipefail
checkout=$(cd "${1:-$(dirname "$0")/..}" && pwd -P)
cd "$checkout" || exit 0
stray=()
for pid in $(pgrep -u "$(id -u)" -f tritonserver || true); do
    [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$checkout" ] || continue
    grep -qa -- "--model-repository=" "/proc/$pid/cmdline" 2>/dev/null && stray+=("$pid")
done
if [ ${#stray[@]} -gt 0 ]; then
    echo "stopping stray tritonserver(s): ${stray[*]}"
    kill -TERM "${stray[@]}" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "${stray[@]}" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL "${stray[@]}" 2>/dev/null
fi
cache="${DEPLOY_CACHE_DIR:-.deploy-cache}"
if [ -d "$cache/tmp" ]; then
    find "$cache/tmp" -mindepth 1 -maxdepth 1 -mmin +1440 -exec rm -rf {} +
fi
exit 0
