"""The remote cache against a local S3 server (moto's, over loopback HTTP): what one run
of a config puts in the cache, how long the upload and the download take, and what a
second agent's run costs when the first one pushed.

    .venv/bin/python benchmarks/remote_cache.py [configs/resnet50.yaml] [--built-cache DIR]

Agent A builds the config cold into its own local cache (or reuses `--built-cache`, a
cache a run of this config filled), then `deploy cache push` uploads it; agent B runs
the config with an empty local cache and the remote (read-through: every stage
downloaded, verified, published); agent C runs `deploy cache pull` (download only).
Loopback moto is an upper bound for bandwidth, not a network: real S3 adds latency per
request and is bandwidth-bound. Prints a Markdown table; writes benchmarks/results/remote_<name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "deploy-bench"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def deploy(*args: str, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "deploy", *args], env={**os.environ, **env}, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(
            f"deploy {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return seconds, done.stdout


def s3_server() -> tuple[object, str]:
    from moto.server import ThreadedMotoServer

    from deploy.serving.ports import free_port

    port = free_port("127.0.0.1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    return server, endpoint


def statuses(summary: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for stage in json.loads(summary.read_text())["stages"]:
        status = "remote" if stage.get("remote") else stage["status"]
        counts[status] = counts.get(status, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?", default="configs/resnet50.yaml")
    parser.add_argument("--built-cache", type=Path, help="a local cache a run of this config filled")
    args = parser.parse_args()
    import boto3

    server, endpoint = s3_server()
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        **{k.lower(): v for k, v in CREDENTIALS.items() if k != "AWS_DEFAULT_REGION"},
        region_name="us-east-1",
    ).create_bucket(Bucket=BUCKET)
    remote = f"s3://{BUCKET}/cache"
    scratch = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    try:
        a, b, c = scratch / "a", scratch / "b", scratch / "c"
        cold = None
        if args.built_cache:
            shutil.copytree(args.built_cache, a, copy_function=os.link)
        else:
            cold, _ = deploy("run", args.config, "--cache-dir", str(a), env={"DEPLOY_CACHE_REMOTE": ""})
        up_s, pushed = deploy("cache", "push", "--cache-dir", str(a), "--remote", remote, env=env)
        match = re.search(r"pushed (\d+) entries, (\d+) objects \(([\d.]+) MB\)", pushed)
        assert match, pushed
        entries, objects, megabytes = int(match[1]), int(match[2]), float(match[3])
        summary = b / "summary.json"
        b.mkdir()
        agent_b, _ = deploy(
            "run",
            args.config,
            "--cache-dir",
            str(b),
            "--json",
            str(summary),
            env={**env, "DEPLOY_CACHE_REMOTE": remote},
        )
        down_s, _ = deploy("cache", "pull", "--cache-dir", str(c), "--remote", remote, env=env)
        result = {
            "config": args.config,
            "entries": entries,
            "objects": objects,
            "megabytes": megabytes,
            "push_s": round(up_s, 2),
            "pull_s": round(down_s, 2),
            "cold_run_s": None if cold is None else round(cold, 1),
            "agent_b_run_s": round(agent_b, 2),
            "agent_b_statuses": statuses(summary),
        }
    finally:
        server.stop()  # type: ignore[attr-defined]
        shutil.rmtree(scratch, ignore_errors=True)
    name = Path(args.config).stem
    out = ROOT / "benchmarks" / "results" / f"remote_{name}.json"
    out.write_text(json.dumps(result, indent=1))
    print(
        "| entries | objects | MB | push s (MB/s) | pull s (MB/s) | agent B run s | agent B stages | cold run s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {entries} | {objects} | {megabytes:.1f} | {up_s:.1f} ({megabytes / up_s:.0f}) | "
        f"{down_s:.1f} ({megabytes / down_s:.0f}) | {agent_b:.1f} | {result['agent_b_statuses']} | {result['cold_run_s']} |"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
