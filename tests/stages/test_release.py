"""The release stage on real checkpoints: the tiny CNN trained on sklearn's digits for 8
and for 30 epochs (different answers, both accurate), and a deliberately slowed copy of
the 30-epoch model (the same answers, slower)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from deploy.pipeline.errors import ExitCode
from deploy.serving import release_journal, releases
from tests.helpers import ROOT, Cli, living_in_session, run_cli, shared_digits, tiny_dict

SLOW_MODEL = '''
import sys
import torch

sys.path.insert(0, {models!r})
from tiny_cnn import tiny_cnn


def slow_tiny_cnn(width: int = 8) -> torch.nn.Module:
    """The same network and answers, plus work whose result is multiplied by zero."""
    model = tiny_cnn(width=width)
    plain = model.forward
    weight = torch.randn(64, 64, generator=torch.Generator().manual_seed(0)) / 8

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for _ in range(300):
            h = torch.tanh(h @ weight)
        return plain(x) + 0.0 * h.sum(dim=1, keepdim=True)

    model.forward = forward
    return model
'''


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    found = {}
    for epochs in (8, 30):
        found[epochs], accuracy = shared_digits(tmp_path_factory, epochs)
        assert accuracy > 0.88, (epochs, accuracy)  # both accurate (0.91, 0.97)
    return found


def _config(tmp_path: Path, checkpoint: Path, **release: object) -> Path:
    data = tiny_dict(tmp_path)
    data["model"]["checkpoint"] = str(checkpoint)
    data["stages"] = {
        "export": data["stages"]["export"],
        "simplify": {},
        "triton_config": {
            "formats": ["onnx", "python"],
            "max_batch_size": 16,
            "instance_group": {"kind": "cpu", "count": 1},
            "publish": "released",
        },
        # A loose timing budget: these tests are about the gate's logic (the slowed model is
        # several times slower); tests/runtimes/test_interleaved.py holds the timing to its word.
        "release": {"keep": 2, "precision": 0.2, "max_s": 2, **release},
    }
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _switch(config: Path, **model: object) -> None:
    data = yaml.safe_load(config.read_text())
    data["model"].update(model)
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def _versions(tmp_path: Path, model: str = "tiny_onnx") -> list[int]:
    return releases.versions(tmp_path / "model_repository" / model)


def test_first_release_then_unchanged_then_a_changed_checkpoint_is_gated(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    held_out = {"kind": "arrays", "path": str(checkpoints[8].parent / "test.npy"), "count": 64}  # real digits
    config = _config(tmp_path, checkpoints[8], holdout=held_out)
    first = cli("run", str(config))
    assert first.returncode == 0, first.stdout + first.stderr
    assert _versions(tmp_path) == [1] and _versions(tmp_path, "tiny_python") == [1]
    # No smoke in this config: what it released is said to be unverified, as a publish says it.
    assert "UNVERIFIED (no stage of this config verifies it" in first.stdout
    manifest = json.loads((tmp_path / "model_repository" / ".deploy-tiny.json").read_text())
    assert manifest["verified_by"] == [] and manifest["unverified"] == ["tiny_onnx", "tiny_python"]
    record = releases.releases(tmp_path / "model_repository" / "tiny_onnx")[0].record
    assert record is not None and record.version == 1 and record.comparison is None
    assert len(record.checkpoint_sha256) == 64 and record.inputs.startswith("golden min / opt / max")

    again = cli("run", str(config), "--force", "release")
    assert again.returncode == 0 and "unchanged: tiny_onnx v1" in again.stdout
    assert _versions(tmp_path) == [1]

    _switch(config, checkpoint=str(checkpoints[30]))
    refused = cli("run", str(config))
    assert refused.returncode == ExitCode.REGRESSION, refused.stdout + refused.stderr
    said = " ".join((refused.stdout + refused.stderr).split())
    assert "nothing was published" in said and "cosine" in said and "--accept-regression" in said
    assert "(random inputs) + 64 held-out samples: arrays from" in said  # what the numbers rest on
    assert _versions(tmp_path) == [1]  # nothing published
    table = json.loads(cli("releases", str(config), "--json").stdout)
    assert {(r["model"], r["version"]) for r in table} >= {("tiny_onnx", 1)}

    accepted = cli("run", str(config), "--accept-regression", "retrained for 30 epochs")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert _versions(tmp_path) == [1, 2]
    newest = releases.releases(tmp_path / "model_repository" / "tiny_onnx")[-1].record
    assert newest is not None and newest.accepted_regression == "retrained for 30 epochs"
    assert newest.checkpoint_sha256 != record.checkpoint_sha256  # another checkpoint, another identity
    listed = json.loads(cli("releases", str(config), "--json").stdout)
    row = next(r for r in listed if r["model"] == "tiny_onnx" and r["version"] == 2)
    assert row["accepted"] == "retrained for 30 epochs" and row["compared"].startswith("vs v1: cosine")
    assert "latency" in row["compared"] and "per item" in row["compared"] and row["rolled back"] == ""
    assert newest.comparison is not None and newest.comparison.against == 1
    # Both sides timed with the one threads policy, the machine during the rounds recorded.
    assert newest.comparison.threads is not None and 1 <= newest.comparison.threads <= (os.cpu_count() or 1)
    assert newest.comparison.machine.startswith(("quiet: load ", "CONTENDED: load "))
    assert newest.comparison.machine in row["compared"]
    assert "64 held-out samples: arrays from" in newest.comparison.inputs
    (logits,) = newest.comparison.agreement
    assert logits.cosine < 0.999 and logits.top1 is not None and 0.5 < logits.top1 <= 1.0
    assert releases.served(tmp_path / "model_repository" / "tiny_onnx") == {2}


def test_a_slower_model_with_the_same_answers_is_refused(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    config = _config(tmp_path, checkpoints[30])
    assert cli("run", str(config)).returncode == 0
    module = tmp_path / "slow_model.py"
    module.write_text(SLOW_MODEL.format(models=str(ROOT / "configs" / "models")))
    _switch(config, file=str(module), callable="slow_tiny_cnn")
    refused = cli("run", str(config))
    assert refused.returncode == ExitCode.REGRESSION, refused.stdout + refused.stderr
    said = " ".join((refused.stdout + refused.stderr).split())
    assert "latency" in said and "nothing was published" in said
    assert "cosine" not in said.split("refused", 1)[1].split("--accept")[0]  # the answers agree
    assert _versions(tmp_path) == [1]


SCALED_MODEL = """
import sys
import torch

sys.path.insert(0, {models!r})
from tiny_cnn import tiny_cnn


class Scaled(torch.nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.net = tiny_cnn(width=width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * 2.0  # a temperature halved: the same direction, twice the size


def scaled_tiny_cnn(width: int = 8) -> torch.nn.Module:
    return Scaled(width)
"""


def test_a_model_answering_twice_as_large_is_refused_though_cosine_and_top1_agree(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    """The gate read cosine and argmax only, which a change of scale leaves at 1.0: a
    checkpoint answering 2x was released as 'cosine 1.000000'."""
    config = _config(tmp_path, checkpoints[30])
    assert cli("run", str(config)).returncode == 0
    import torch

    state = torch.load(checkpoints[30])
    torch.save({f"net.{k}": v for k, v in state.items()}, tmp_path / "scaled.pt")  # the same weights
    module = tmp_path / "scaled_model.py"
    module.write_text(SCALED_MODEL.format(models=str(ROOT / "configs" / "models")))
    _switch(config, file=str(module), callable="scaled_tiny_cnn", checkpoint=str(tmp_path / "scaled.pt"))
    refused = cli("run", str(config))
    assert refused.returncode == ExitCode.REGRESSION, refused.stdout + refused.stderr
    said = " ".join((refused.stdout + refused.stderr).split())
    assert "logits: size 2x v1's (norm of a sample, new / deployed), beyond 1 ± 0.05" in said, said
    assert "cosine" not in said.split("refused", 1)[1].split("--accept")[0]  # the directions agree
    assert _versions(tmp_path) == [1]


def test_the_size_of_an_answer_is_measured_per_sample_either_way() -> None:
    """row_norm_ratios and the gate's bounds, on numbers whose answer is known."""
    import numpy as np

    from deploy.stages.release.compare import agree
    from deploy.stages.release.stage import _within

    old = np.array([[3.0, 4.0], [1.0, 0.0]])  # norms 5 and 1
    (same,) = agree([{"y": old}], [{"y": old}], ["y"])
    (shrunk,) = agree([{"y": old}], [{"y": old * np.array([[1.0], [0.5]])}], ["y"])
    assert same.scale == 1.0 and shrunk.scale == 0.5 and shrunk.cosine == 1.0
    assert _within(1.04, 0.05) and _within(1 / 1.05, 0.05) and not _within(0.94, 0.05)
    assert not _within(float("nan"), 0.05) and not _within(float("inf"), 0.05)


def test_keep_prunes_old_versions(tmp_path: Path, checkpoints: dict[int, Path], cli: Cli) -> None:
    config = _config(tmp_path, checkpoints[8], accept_regression="test: every retrain is released")
    assert cli("run", str(config)).returncode == 0
    for checkpoint in (checkpoints[30], checkpoints[8]):
        _switch(config, checkpoint=str(checkpoint))
        done = cli("run", str(config))
        assert done.returncode == 0, done.stdout + done.stderr
    assert _versions(tmp_path) == [2, 3]  # keep: 2


def test_release_needs_publish_released(tmp_path: Path, checkpoints: dict[int, Path], cli: Cli) -> None:
    config = _config(tmp_path, checkpoints[8])
    data = yaml.safe_load(config.read_text())
    data["stages"]["triton_config"].pop("publish")
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    done = cli("validate", str(config))
    assert done.returncode == ExitCode.CONFIG and "publish: released" in done.stdout + done.stderr


def test_rollback_serves_the_earlier_version_and_a_release_does_not_bring_it_back(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    config = _config(tmp_path, checkpoints[8])
    assert cli("run", str(config), env={"DEPLOY_ACCEPT_REGRESSION": "nothing to accept"}).returncode == 0
    first = releases.releases(tmp_path / "model_repository" / "tiny_onnx")[0].record
    assert first is not None and first.accepted_regression is None  # a first release overrides nothing
    _switch(config, checkpoint=str(checkpoints[30]))
    build = {
        "DEPLOY_ACCEPT_REGRESSION": "retrained",
        "BUILD_URL": "https://ci.example/job/d/7/",
        "WORKSPACE": str(tmp_path),
    }
    assert cli("run", str(config), env=build).returncode == 0  # as the Jenkinsfile passes it
    model_dir = tmp_path / "model_repository" / "tiny_onnx"
    assert releases.served(model_dir) == {2}
    record = releases.releases(model_dir)[-1].record
    assert record is not None and record.accepted_regression == "retrained"
    assert record.build_url == build["BUILD_URL"]
    assert record.report == "https://ci.example/job/d/7/artifact/runs/tiny/report.html"

    stopped = _rollback_stopped_while_waiting(config, tmp_path / "model_repository")
    assert stopped.returncode == ExitCode.INTERRUPTED, stopped.stderr
    assert "interrupted (signal SIGTERM): nothing was rolled back" in stopped.stderr, stopped.stderr
    assert stopped.stderr.count("interrupted") == 1, stopped.stderr  # the CLI adds no line of its own
    assert releases.served(model_dir) == {2}
    rolled = cli("rollback", str(config))
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert "tiny_onnx: v2 -> v1" in rolled.stdout and "tiny_python: v2 -> v1" in rolled.stdout
    assert releases.served(model_dir) == {1}
    newest = releases.releases(model_dir)[-1].record
    assert newest is not None and newest.rolled_back is not None and newest.rolled_back.endswith("to v1")
    listed = json.loads(cli("releases", str(config), "--json").stdout)
    assert [(r["version"], r["served"]) for r in listed if r["model"] == "tiny_onnx"] == [
        (1, True),
        (2, False),
    ]

    again = cli("run", str(config))  # the checkpoint that was rolled back
    assert again.returncode == ExitCode.REGRESSION, again.stdout + again.stderr
    assert "rolled back" in again.stdout + again.stderr and releases.served(model_dir) == {1}

    forward = cli("rollback", str(config), "--to", "2")
    assert forward.returncode == 0 and releases.served(model_dir) == {2}
    missing = cli("rollback", str(config), "--to", "9")
    assert missing.returncode == ExitCode.USAGE, missing.stdout + missing.stderr  # the command line's mistake
    assert "Invalid value for --to: no model of 'tiny' keeps a v9" in missing.stderr and releases.served(
        model_dir
    ) == {2}


HOLD_REPOSITORY = """
import sys, time
from pathlib import Path
from deploy.pipeline.store import locks
with locks.repository(Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(60)  # bounded: a rollback that never says it waits fails the test in a minute
"""


def _rollback_stopped_while_waiting(config: Path, repository: Path) -> subprocess.CompletedProcess[str]:
    """`deploy rollback` sent SIGTERM as it waits for the repository's lock (a CI job aborted
    while another command publishes there): it used to die silently with 143."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_REPOSITORY, str(repository)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        rollback = subprocess.Popen(
            [sys.executable, "-m", "deploy", "rollback", str(config)], stderr=subprocess.PIPE, text=True
        )
        assert rollback.stderr is not None
        waiting = rollback.stderr.readline()
        assert f"waiting for pid {holder.pid}" in waiting, waiting
        rollback.send_signal(signal.SIGTERM)
        rest = rollback.communicate(timeout=60)[1]
        return subprocess.CompletedProcess(rollback.args, rollback.returncode, "", waiting + rest)
    finally:
        holder.kill()
        holder.wait()


def test_a_deleted_repository_is_released_again_and_a_settled_one_is_a_cache_hit(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    """The stage's entry is kept under the repository state it left: the next run finds
    it, and a run after the repository was deleted publishes v1 again, never reports a
    release that is not there."""
    import shutil

    config = _config(tmp_path, checkpoints[8])
    assert cli("run", str(config)).returncode == 0
    settled = cli("run", str(config), "-v")
    assert settled.returncode == 0 and _status(settled.stdout, "release") == "cached", settled.stdout
    shutil.rmtree(tmp_path / "model_repository")
    again = cli("run", str(config))
    assert again.returncode == 0 and _status(again.stdout, "release") == "ran", again.stdout
    assert _versions(tmp_path) == [1] and _versions(tmp_path, "tiny_python") == [1]
    assert "first release: tiny_onnx v1" in again.stdout


def test_a_released_file_changed_since_is_put_back_by_the_next_run(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    """With publish: released, a file edited in a served version was never noticed: the
    release stage was a cache hit, said `unchanged`, and the edit stayed served."""
    config = _config(tmp_path, checkpoints[8])
    first = cli("run", str(config))
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.rstrip().endswith("(its released versions: deploy releases CONFIG)")
    target = tmp_path / "model_repository" / "tiny_onnx" / "1" / "model.onnx"
    released = target.read_bytes()
    edited = released[:-8] + bytes(8)  # same size, other bytes
    target.write_bytes(edited)
    killed = run_cli(
        "run", str(config), env={"DEPLOY_FAULT": "repair#1"}
    )  # SIGKILL: copy written, not renamed
    assert killed.returncode == ExitCode.CRASHED, killed.stdout + killed.stderr
    assert target.read_bytes() == edited and len(list(target.parent.glob(".model.onnx.repair-*"))) == 1
    again = cli("run", str(config))
    assert again.returncode == 0 and _status(again.stdout, "release") == "ran", again.stdout
    assert "unchanged: tiny_onnx v1 (restored model.onnx: changed since it was released)" in again.stdout
    assert target.read_bytes() == released and not list(target.parent.glob(".*")), "the dead one's copy swept"
    settled = cli("run", str(config), "-v")
    assert _status(settled.stdout, "release") == "cached", settled.stdout


def _status(stdout: str, stage: str) -> str:
    line = next(line for line in stdout.splitlines() if line.startswith(f"{stage} "))
    return line.split()[1]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP])
def test_a_release_killed_as_its_version_appears_is_finished_by_the_next_run(
    tmp_path: Path, checkpoints: dict[int, Path], signum: int, cli: Cli
) -> None:
    """The signal lands right after the first model's new version is renamed into place,
    before its config, pruning, stamp, the other model and the manifest: every version
    there is whole, no process is left, and the next run finishes the release without
    releasing anything twice."""
    from deploy.pipeline.publish.readback import complete

    config = _config(tmp_path, checkpoints[8])
    assert cli("run", str(config)).returncode == 0
    _switch(config, checkpoint=str(checkpoints[30]))
    accept = ("--accept-regression", "retrained")
    run = subprocess.Popen(
        [sys.executable, "-m", "deploy", "run", str(config), *accept],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    appears = tmp_path / "model_repository" / "tiny_onnx" / "2"
    deadline = time.monotonic() + 600
    while not appears.exists() and run.poll() is None and time.monotonic() < deadline:
        pass  # spinning: the moment is milliseconds long
    os.killpg(run.pid, signum)
    run.wait(timeout=120)
    deadline = time.monotonic() + 30  # its stage child dies after the fork server, in turn
    while living_in_session(run.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert living_in_session(run.pid) == set()  # nothing of that run outlives it
    for model in ("tiny_onnx", "tiny_python"):
        for release in releases.releases(tmp_path / "model_repository" / model):
            assert release.record is not None, (model, release)
            assert releases.file_digests(tmp_path / "model_repository" / model / str(release.version)) == (
                release.record.files
            )

    interrupted = release_journal.path(tmp_path / "model_repository", "tiny").is_file()
    again = cli("run", str(config), *accept)
    assert again.returncode == 0, again.stdout + again.stderr
    said = " ".join(again.stdout.split())
    if interrupted:  # the signal landed inside the transaction: reverted or completed, and said
        assert "ed the interrupted release of 'tiny'" in said, said
    else:  # it landed after the transaction's last step: nothing left to recover
        assert "interrupted release" not in said, said
    repository = tmp_path / "model_repository"
    assert _versions(tmp_path) == [1, 2] and _versions(tmp_path, "tiny_python") == [1, 2]
    assert complete(repository, "tiny") == []
    for model in ("tiny_onnx", "tiny_python"):
        stamp = json.loads((repository / model / ".deploy.json").read_text())
        assert {f"2/{f}" for f in releases.file_digests(repository / model / "2")} <= set(stamp["files"])
        assert releases.served(repository / model) == {2}


@pytest.mark.triton
def test_the_record_holds_the_server_the_int8_accuracy_bench_and_select(
    tmp_path: Path, checkpoints: dict[int, Path], cli: Cli
) -> None:
    config = _config(tmp_path, checkpoints[30])
    data = yaml.safe_load(config.read_text())
    train = str(checkpoints[30].parent / "train.npy")
    data["stages"]["quantize"] = {
        "calibration": {"kind": "arrays", "path": train, "count": 32},
        "gate": {"min_cosine": 0.9},
    }
    data["stages"]["triton_config"].update(formats=["python"], precisions=["fp32", "int8"])
    data["stages"]["smoke"] = {"server": {"kind": "auto", "startup_timeout_s": 120}}
    fast = {"warmup_ms": 10, "duration_s": 0.2, "iterations": 10, "batches": [1, 4]}
    data["stages"]["bench"] = {**fast, "runtimes": ["onnxruntime", "onnxruntime_int8", "triton"]}
    data["stages"]["select"] = {"objectives": [{"name": "latency", "metric": "latency"}]}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    done = cli("run", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    int8 = releases.releases(tmp_path / "model_repository" / "tiny_python_int8")[0].record
    fp32 = releases.releases(tmp_path / "model_repository" / "tiny_python")[0].record
    assert int8 is not None and fp32 is not None
    assert int8.server.startswith("tritonserver 2.") and int8.server.endswith("smoke passed")
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    quantize = next(s for s in summary["stages"] if s["stage"] == "quantize")["metrics"]["accuracy"]
    worst = min(o["min_sample_cosine"] for o in quantize["outputs"].values())
    assert int8.accuracy == {"int8 worst cosine to FP32": round(worst, 6)} and fp32.accuracy == {}
    outputs = {s["stage"]: s["outputs"] for s in summary["stages"]}
    bench = json.loads(Path(outputs["bench"]["results"]["path"]).read_text())["results"]
    selection = json.loads(Path(outputs["select"]["selection"]["path"]).read_text())
    (latency,) = selection["objectives"]
    assert latency["model"] in {"tiny_python_int8", "tiny_python"}
    for model, record in (("tiny_python_int8", int8), ("tiny_python", fp32)):
        rows = [r for r in bench if r["runtime"] == "triton" and r["model"] == model]
        (single,) = [r for r in rows if r["batch"] == 1 and r.get("concurrency", 1) == 1]
        assert record.latency_ms == round(single["median_ms"], 3)
        assert record.throughput == round(max(r["items_per_s"] for r in rows), 2)
        assert record.target == selection["target"] and "tritonserver" in record.target
        assert record.selected_for == (["latency"] if latency["model"] == model else [])


def test_the_report_conclusion_says_how_the_release_compares(tmp_path: Path) -> None:
    """A stage's conclusion fact joins the conclusion select wrote (the report's first box)."""
    from deploy.pipeline.report.html import render
    from deploy.pipeline.report.results import RunStatus, RunSummary, StageSummary, Status

    conclusion = {
        "decision": "deploy x",
        "target": "cpu",
        "facts": [["speed vs FP32", "2.0x"]],
        "chart_stage": "",
    }
    stages = [
        StageSummary("select", Status.RAN, metrics={"conclusion": conclusion}),
        StageSummary(
            "release",
            Status.RAN,
            metrics={"conclusion_facts": [["vs the deployed release", "released: m v2"]]},
        ),
    ]
    html = render(RunSummary("p", "p.yaml", RunStatus.OK, stages), {})
    box = html.split("<section id='conclusion'", 1)[1].split("</section>", 1)[0]
    assert "speed vs FP32" in box and "<th>vs the deployed release</th><td>released: m v2</td>" in box


def test_a_pipeline_releases_whole_or_says_what_was_held_back() -> None:
    """One model refused: the one compared by its files only is held back, never "released"."""
    from deploy.stages.release.output import _whole
    from deploy.stages.release.release_report import ModelRelease, ReleaseAction

    decided = [
        ModelRelease("m_onnx", ReleaseAction.REFUSED, None, 1, problems=["logits: cosine 0.9 to v1 < 0.999"]),
        ModelRelease("m_torchscript", ReleaseAction.RELEASED, 2, 1, note="compared by its files only"),
        ModelRelease("m_python", ReleaseAction.UNCHANGED, 1),
    ]
    held = _whole(decided)
    assert [(m.action, m.version) for m in held] == [
        (ReleaseAction.REFUSED, None),
        (ReleaseAction.HELD, None),
        (ReleaseAction.UNCHANGED, 1),
    ]
    assert "not published" in held[1].note
    assert _whole(decided[1:]) == decided[1:]  # nothing refused: as decided


def test_an_undecided_speed_names_the_machine_it_was_timed_on() -> None:
    """ "inconclusive" said nothing of the load: a busy agent and a noisy model read alike."""
    from deploy.stages.release import output
    from deploy.stages.release.release_report import ModelRelease, ReleaseAction

    busy = "CONTENDED: load 6.1 on 2 cores, others 58 % of the cores"
    timed = releases.Comparison(2, "golden", [], 1.01, None, [0.9, 1.12], None, 3, threads=1, machine=busy)
    unsure = ModelRelease("tiny_onnx", ReleaseAction.INCONCLUSIVE, None, 2, timed, ["latency 1.01x"])
    untimed = ModelRelease("tiny_python", ReleaseAction.INCONCLUSIVE, None, 2, None, ["latency 1.0x"])
    assert output._while([unsure, untimed]) == f" (tiny_onnx timed with 1 thread each, {busy})"
    assert output._while([untimed]) == ""
