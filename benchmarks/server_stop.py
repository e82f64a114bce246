"""How long stopping a tritonserver takes, the ways deploy could stop it, on one model
repository: SIGTERM to its process group (Triton's graceful stop, `deploy serve`'s), an
explicit unload of every model first and then SIGTERM, and SIGKILL (a stage's server, idle
when its checks end). Each way runs on a fresh server, `--repeats` times, interleaved;
after each stop, what the python backend left in /dev/shm under the server's prefix is
counted (a graceful stop unlinks it; deploy removes it after a kill). Before each stop's
server starts, the cores other processes leave free (a 0.3 s sample) and the load average
are recorded: a stop timed on a busy machine says so.

    .venv/bin/python benchmarks/server_stop.py configs/resnet50.yaml   # after `deploy run` made its repository

Writes benchmarks/results/server_stop_<name>.json.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("sigterm", "unload_then_sigterm", "sigkill")


def _unload_all(server: Any) -> None:
    from deploy.serving import tritonserver

    request = urllib.request.Request(f"http://{server.http}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=60) as reply:
        models = [m["name"] for m in json.loads(reply.read())]
    for model in models:
        tritonserver._post(server, f"/v2/repository/models/{model}/unload")


def _stop(way: str, server: Any) -> float:
    """Seconds from the first signal (or unload request) to the group's end."""
    process = server.process
    began = time.perf_counter()
    if way == "unload_then_sigterm":
        _unload_all(server)
    os.killpg(process.pid, signal.SIGKILL if way == "sigkill" else signal.SIGTERM)
    process.wait()
    took = time.perf_counter() - began
    if _group_alive(process.pid):  # stubs a graceful stop left: not ours to leave
        os.killpg(process.pid, signal.SIGKILL)
    return took


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _once(way: str, repository: Path, spec: Any) -> dict[str, float | int]:
    from deploy.pipeline.process import lifeline
    from deploy.serving import tritonserver
    from deploy.serving.launch import serve_repository

    with tempfile.TemporaryDirectory() as work:
        stopped: dict[str, float | int] = {}

        def stop(server: Any, grace_s: float) -> None:  # the way under test, in place of deploy's
            stopped["seconds"] = _stop(way, server)
            time.sleep(0.2)  # what a killed stub leaves is there by now
            stopped["shm_left"] = len(list(lifeline.SHM_DIR.glob(f"{server.shm}*"))) if server.shm else 0
            lifeline.remove_shm(server.shm)

        original, tritonserver.stop = tritonserver.stop, stop
        try:
            with serve_repository(spec, repository, Path(work)) as served:
                stopped["models"] = len(served.states)
        finally:
            tritonserver.stop = original
    return stopped


def main() -> None:
    from serve_check_cost import project_and_repeats  # a sibling: benchmarks/ is the script's path

    from deploy.runtimes import contention
    from deploy.serving.server_spec import ServerSpec

    project, repeats = project_and_repeats()
    repository = project.config.repository
    runs: dict[str, list[dict[str, float | int]]] = {way: [] for way in WAYS}
    for _ in range(repeats):
        for way in WAYS:
            machine = {"cores_free": round(contention.cores_free(), 2), "load1": round(os.getloadavg()[0], 2)}
            runs[way].append(_once(way, repository, ServerSpec()) | machine)
            print(way, runs[way][-1], flush=True)
    found = {
        way: {
            "median_s": round(statistics.median(r["seconds"] for r in rows), 3),
            "all_s": [round(float(r["seconds"]), 3) for r in rows],
            "shm_left": [int(r["shm_left"]) for r in rows],
            "models": rows[0]["models"],
            "cores_free_before": [r["cores_free"] for r in rows],
            "load1_before": [r["load1"] for r in rows],
        }
        for way, rows in runs.items()
    }
    least = min(r["cores_free"] for rows in runs.values() for r in rows)
    machine = f"{contention.cores()} cores; least free before a stop {least:.2f}"
    result = {"config": str(project.path), "repository": str(repository), "machine": machine, "ways": found}
    out = ROOT / "benchmarks" / "results" / f"server_stop_{project.config.name}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
