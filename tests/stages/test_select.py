"""select: the best (format, precision) per objective from measured rows and accuracy,
every loser with its reason."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from deploy.pipeline.errors import ConfigError, ExitCode, StageError
from deploy.runtimes.contention import Environment
from deploy.runtimes.record import BenchResults, BenchRow
from deploy.runtimes.selection_record import Basis, Selection, Verdict
from deploy.serving.smoke_report import ModelResult, ModelStatus, ServerInfo, SmokeReport
from deploy.stages.select import candidates, output, selection
from deploy.stages.select.params import Objective
from tests.helpers import HOST, bench_row, comparable, output_path, real_tensorrt, run

row = bench_row

FAST = {"warmup_ms": 10, "duration_s": 0.05, "iterations": 5, "batches": [1, 4]}


# Measured shape of MobileNetV3 on 2 cores (issue 12): INT8 slower than FP32 at batch 1.
ROWS = [row("onnxruntime", 1, 1.40), row("onnxruntime_int8", 1, 1.47), row("eager", 1, 4.0)]


def gather(rows, skipped, cosines, smoke=None):
    return candidates.gather(BenchResults(rows, skipped, HOST), cosines, smoke)


def test_fp32_wins_over_an_int8_that_is_slower() -> None:
    found = gather(ROWS, {}, {"accuracy_int8": 0.999})
    decision = selection.decide(found, Objective(name="latency", metric="latency"))
    assert decision.winner is not None and decision.winner.candidate.runtime == "onnxruntime"
    int8 = next(e for e in decision.entries if e.candidate.runtime == "onnxruntime_int8")
    assert int8.verdict is Verdict.SLOWER
    assert "1.470 ms vs 1.400 ms (1.05x worse than onnx fp32 (onnxruntime))" in int8.reason


def test_constraints_reject_with_the_number_and_skips_keep_their_reason() -> None:
    rows = [row("onnxruntime", 1, 2.0, p99_ms=30.0), row("onnxruntime_int8", 1, 1.0)]
    found = gather(rows, {"tensorrt": "no engine: its stage was skipped"}, {"accuracy_int8": 0.993})
    decision = selection.decide(
        found, Objective(name="x", metric="latency", max_latency_ms=20, min_cosine=0.995)
    )
    verdicts = {e.candidate.runtime: (e.verdict.value, e.reason) for e in decision.entries}
    assert verdicts == {
        "onnxruntime": ("rejected", "p99 30.000 ms > 20.0 ms"),
        "onnxruntime_int8": ("rejected", "cosine 0.99300 < 0.995"),
        "tensorrt": ("skipped", "no engine: its stage was skipped"),
    }
    assert decision.winner is None


def test_an_int8_gain_inside_min_gain_keeps_fp32() -> None:
    rows = [row("onnxruntime", 1, 3.47), row("onnxruntime_int8", 1, 3.22)]  # 7.8 % faster
    found = gather(rows, {}, {"accuracy_int8": 0.999})
    objective = Objective(name="latency", metric="latency")
    kept = selection.decide(found, objective, min_gain=0.10)
    assert kept.winner.candidate.runtime == "onnxruntime"
    int8 = next(e for e in kept.entries if e.candidate.runtime == "onnxruntime_int8")
    assert int8.reason == "3.220 ms vs 3.470 ms: 7.8 % better than onnx fp32 (onnxruntime), within min_gain"
    assert selection.decide(found, objective, min_gain=0.05).winner.candidate.runtime == "onnxruntime_int8"


def test_throughput_compares_at_the_largest_measured_batch() -> None:
    rows = [*ROWS, row("onnxruntime", 8, 6.0), row("onnxruntime_int8", 8, 4.0)]
    found = gather(rows, {}, {"accuracy_int8": 0.999})
    decision = selection.decide(found, Objective(name="t", metric="throughput"))
    assert decision.batch == 8 and decision.winner.candidate.runtime == "onnxruntime_int8"
    eager = next(e for e in decision.entries if e.candidate.runtime == "eager")
    assert eager.verdict is Verdict.SKIPPED and eager.reason == "not measured in process at batch 8"


def select_config(write_config, select: dict):
    stages = {
        "trace": {},
        "export": {},
        "quantize": {"calibration": {"count": 8}, "holdout_count": 8, "gate": {"min_cosine": 0.9}},
        "build": {"required": False},  # skipped here (no TensorRT): a skipped candidate
        "bench": {**FAST, "runtimes": ["onnxruntime", "onnxruntime_int8", "tensorrt"]},
        "select": select,
    }
    return write_config(replace={"stages": stages}, name="select.yaml")


def test_select_stage_agrees_with_what_bench_measured(write_config) -> None:
    # min_gain 0: the fastest measured row wins outright (min_gain has its own test; with it,
    # an INT8 a few % faster than FP32 on this run would rightly lose).
    path = select_config(write_config, {"min_gain": 0})
    results = run(path)
    bench = json.loads(output_path(path, results, "bench", "results").read_text())["results"]
    chosen = json.loads(output_path(path, results, "select", "selection").read_text())
    for objective, pick in (("latency", min), ("throughput", max)):
        decided = next(o for o in chosen["objectives"] if o["name"] == objective)
        rows = [r for r in bench if r["batch"] == decided["batch"]]
        steady = [r for r in rows if comparable(r)]  # no verdict on noise: comparable rows decide
        assert bool(decided["withheld"]) == (not steady), decided
        key = "median_ms" if objective == "latency" else "items_per_s"
        best = pick(steady, key=lambda r: r[key]) if steady else {"runtime": "onnxruntime"}  # else FP32
        assert (
            decided["selected"]
            == f"onnx {'int8' if best['runtime'].endswith('int8') else 'fp32'} ({best['runtime']})"
        )
        verdicts = {c["runtime"]: c["verdict"] for c in decided["candidates"]}
        assert (verdicts["tensorrt"] == "skipped") != real_tensorrt()
        assert list(verdicts.values()).count("selected") == 1
    assert set(chosen["accuracy"]) == {"onnxruntime_int8"}
    tables = [t["title"] for t in results["select"].metrics["report"]]
    # No smoke in this config: the decision says it holds for in-process runtimes.
    # (unless no row of an objective settled on this busy machine: then the headline says so first)
    noisy = any(o["withheld"] for o in chosen["objectives"])
    assert tables[0].startswith("NO SPEED VERDICT for " if noisy else "deploy onnx "), tables[0]
    assert "target: in-process runtimes on " in tables[0]
    assert tables[1] == "Status per format and precision"


def test_select_fails_when_no_candidate_meets_the_constraints(write_config) -> None:
    path = select_config(
        write_config, {"objectives": [{"name": "tight", "metric": "latency", "max_latency_ms": 1e-6}]}
    )
    with pytest.raises(StageError) as failed:
        run(path)
    said = str(failed.value)
    if failed.value.exit_code is ExitCode.CONTENDED:  # a row was timed beside other workers: no verdict
        assert "no candidate is known to meet the constraints of 'tight'" in said and "not judged" in said, (
            said
        )
    else:
        assert "no candidate meets the constraints of 'tight'; every verdict is in the run report" in said, (
            said
        )


def test_a_constraint_broken_on_a_flagged_row_is_not_judged() -> None:
    """p99 over the limit on a contended row is no rejection: the row is set aside, its
    reason says the limit was not judged, and a comparable row that meets it is picked."""
    rows = [contended(row("onnxruntime", 1, 2.0)), row("onnxruntime_int8", 1, 2.2)]
    tight = Objective(name="tight", metric="latency", max_latency_ms=2.5, min_cosine=None)
    decision = selection.decide(gather(rows, {}, {"accuracy_int8": 0.999}), tight)
    assert decision.winner is not None and decision.winner.candidate.runtime == "onnxruntime_int8"
    rows = [contended(row("onnxruntime", 1, 2.0, p99_ms=9.0)), row("onnxruntime_int8", 1, 3.0)]
    decision = selection.decide(gather(rows, {}, {"accuracy_int8": 0.999}), tight)
    fp32 = next(e for e in decision.entries if e.candidate.runtime == "onnxruntime")
    assert fp32.verdict is Verdict.CONTENDED and fp32.reason.startswith(
        "p99 9.000 ms > 2.5 ms, but CONTENDED"
    )
    assert [e.candidate.runtime for e in decision.set_aside] == ["onnxruntime"]


def test_a_constraint_met_on_a_flagged_row_is_not_judged_either() -> None:
    """Under load bench fits fewer threads, and a small model ran faster: a limit met on
    a contended row was taken as met, and the pick failed it on the quiet machine."""
    tight = Objective(name="tight", metric="latency", max_latency_ms=2.5, min_cosine=None)
    rows = [contended(row("onnxruntime", 1, 1.0, p99_ms=1.2)), implausible(row("eager", 1, 2.0, p99_ms=2.2))]
    decision = selection.decide(gather(rows, {}, {}), tight)
    assert decision.winner is None
    verdicts = {e.candidate.runtime: (e.verdict, e.reason) for e in decision.entries}
    assert verdicts["onnxruntime"][0] is Verdict.CONTENDED
    assert verdicts["onnxruntime"][1].startswith("its p99 within 2.5 ms, but CONTENDED")
    assert verdicts["eager"][0] is Verdict.IMPLAUSIBLE
    assert sorted(e.candidate.runtime for e in decision.set_aside) == ["eager", "onnxruntime"]


def test_beside_a_pick_no_timing_made_the_others_keep_their_flag_and_say_if_faster() -> None:
    """Every row contended: the FP32 reference is kept; the others read `slower` though one
    measured faster than the pick."""
    rows = [contended(row("eager", 1, 4.0)), contended(row("onnxruntime", 1, 1.0))]
    decision = selection.decide(gather(rows, {}, {}), Objective(name="latency", metric="latency"))
    assert decision.withheld and decision.winner is not None
    other = next(e for e in decision.entries if e is not decision.winner)
    assert other.verdict is Verdict.CONTENDED, other
    assert other.reason.endswith(
        f"possibly faster than the pick ({decision.winner.candidate.label}): rerun quiet"
    )


def test_with_no_speed_verdict_what_is_served_is_the_first_fp32_one_not_the_fastest_looking() -> None:
    """Every row contended, eager kept (no Triton model): publish: selected ranked the
    others by their contended numbers; then, with those set aside, served nothing and failed
    the run (mobilenetv3 on a busy CI agent). It serves the reference's precision, unranked."""
    rows = [
        contended(row("eager", 1, 8.0)),
        contended(row("onnxruntime", 1, 1.1)),
        contended(row("onnxruntime_int8", 1, 0.5)),
    ]
    found = gather(rows, {}, {"accuracy_int8": 0.9995})
    decision = selection.decide(found, Objective(name="latency", metric="latency"))
    assert decision.withheld and decision.winner is not None and decision.winner.candidate.runtime == "eager"
    pick = selection.served_pick(decision, lambda c: [] if c.runtime == "eager" else [f"m_{c.runtime}"])
    assert pick is not None and pick.candidate.runtime == "onnxruntime"  # FP32, though INT8 read faster


def test_objective_names_must_differ(write_config) -> None:
    path = select_config(write_config, {"objectives": [{"name": "a", "metric": "latency"}] * 2})
    with pytest.raises(ConfigError, match="objective names must differ"):
        run(path)


def test_the_status_table_is_printed_after_the_run(write_config, tmp_path) -> None:
    from tests.helpers import run_cli

    path = select_config(write_config, {})
    done = run_cli("run", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    # The first line of select's output names what to deploy and the target it holds for (after
    # a warning, first, where no row settled on this busy machine).
    first = next(
        i for i, line in enumerate(lines) if line.startswith(("select: deploy ", "select: NO SPEED VERDICT"))
    )
    assert "deploy onnx " in lines[first] and "target: in-process runtimes" in lines[first]
    assert lines[first + 1] == "objective | deploy | value | compared on"
    start = lines.index("select: Status per format and precision")
    assert lines[start + 1].startswith(
        "candidate | verified | accuracy (cosine to FP32) | latency b1 median ms"
    )
    assert any(line.startswith("onnx int8 (onnxruntime_int8) | yes | ") for line in lines[start:])


def test_an_eager_winner_is_served_by_the_best_contender_triton_serves() -> None:
    rows = [row("eager", 1, 1.0), row("onnxruntime", 1, 2.0), row("torchscript", 1, 3.0)]
    decision = selection.decide(gather(rows, {}, {}), Objective(name="latency", metric="latency"))
    assert decision.winner.candidate.runtime == "eager"
    pick = selection.served_pick(decision, lambda c: [] if c.format == "pytorch" else [c.format])
    assert pick is not None and pick.candidate.runtime == "onnxruntime"
    assert selection.served_pick(decision, lambda c: []) is None


def publishing_config(write_config, publish: str):
    stages = {
        "trace": {},
        "export": {},
        "quantize": {"calibration": {"count": 8}, "holdout_count": 8, "gate": {"min_cosine": 0.9}},
        "triton_config": {
            "formats": ["onnx", "torchscript", "python"],
            "precisions": ["fp32", "int8"],
            "publish": publish,
        },
        "bench": {**FAST, "runtimes": ["onnxruntime", "onnxruntime_int8", "torchscript"]},
        "select": {},
    }
    return write_config(replace={"stages": stages}, name="publish.yaml")


def _published(tmp_path) -> set[str]:
    return {p.parent.name for p in (tmp_path / "model_repository").glob("*/.deploy.json")}


def test_publish_selected_publishes_only_the_models_serving_the_picks(write_config, tmp_path) -> None:
    from deploy.pipeline.process.runner import Status

    path = publishing_config(write_config, "selected")
    results = run(path)
    chosen = json.loads(output_path(path, results, "select", "selection").read_text())
    expected = set()
    for objective in chosen["objectives"]:
        runtime = next(c["runtime"] for c in objective["candidates"] if c["verdict"] == "selected")
        models = {
            "onnxruntime": ["tiny_onnx", "tiny_python"],
            "onnxruntime_int8": ["tiny_onnx_int8", "tiny_python_int8"],
            "torchscript": ["tiny_torchscript"],
        }[runtime]
        assert chosen["served"][objective["name"]] == models
        expected |= set(models)
    assert _published(tmp_path) == expected
    everything = set(results["triton_config"].metrics["models"])
    assert len(everything) == 5 and expected < everything
    # Back to `all`: every model is published again; only triton_config reran.
    again = run(publishing_config(write_config, "all"))
    assert _published(tmp_path) == everything
    ran = {name for name, r in again.items() if r.status is Status.RAN}
    assert ran == {"triton_config"}


def test_selection_record_round_trip(tmp_path) -> None:
    from dataclasses import replace

    found = gather(ROWS, {"tensorrt": "no engine"}, {"accuracy_int8": 0.999})
    decisions = [selection.decide(found, Objective(name=m, metric=m)) for m in ("latency", "throughput")]
    written = replace(selection.record(decisions, found), served={"latency": ["m_onnx"]})
    path = tmp_path / "selection.json"
    path.write_text(json.dumps(written.to_json()))
    back = Selection.read(path)
    assert back == written
    assert back.objectives[0].selected == "onnx fp32 (onnxruntime)"
    assert {j.verdict for j in back.objectives[0].candidates} >= {Verdict.SKIPPED}


def test_publish_selected_publishes_the_chosen_models_services_with_them(write_config, tmp_path) -> None:
    """With pre/post-processing, the ensembles over the chosen models and the pre/post
    models they run are published beside them; the other ensembles are not."""
    path = publishing_config(write_config, "selected")
    data = yaml.safe_load(path.read_text())
    (tmp_path / "labels.txt").write_text("".join(f"digit {i}\n" for i in range(10)))
    data["stages"]["triton_config"].update(
        preprocess={
            "kind": "image",
            "color": "grayscale",
            "resize": 8,
            "crop": 8,
            "mean": [0.0],
            "std": [1.0],
        },
        postprocess={"kind": "classify", "labels": str(tmp_path / "labels.txt")},
    )
    path.write_text(yaml.safe_dump(data))
    results = run(path)
    chosen = json.loads(output_path(path, results, "select", "selection").read_text())
    served = {m for models in chosen["served"].values() for m in models}
    models = {m for m in served if not m.endswith(("_ensemble", "_pre", "_post"))}
    assert served == models | {f"{m}_ensemble" for m in models} | {"tiny_pre", "tiny_post"}
    assert _published(tmp_path) == served
    written = set(results["triton_config"].metrics["services"])
    left_out = written - served  # the ensembles over models nobody chose
    assert len([m for m in written if m.endswith("_ensemble")]) == 5
    assert left_out and all(m.endswith("_ensemble") for m in left_out)


# -- the target: what the server smoke ran verified ------------------------------------------------
def smoke_report(**statuses: tuple[str, str, str]) -> SmokeReport:
    """model -> (format, precision, status); onnx-format models skipped for the backend."""
    models = {}
    for name, (fmt, precision, status) in statuses.items():
        reason = "the server has no 'onnxruntime' backend" if status == "skipped" else ""
        models[name] = ModelResult(ModelStatus(status), fmt, precision, "python", reason=reason)
    server = ServerInfo("auto", "2.51.0", "127.0.0.1:1", "127.0.0.1:2", ["python"])
    return SmokeReport(models, server)


# resnet50's shape on this machine: in process ORT INT8 is fastest, but the server has no
# onnxruntime backend, and the INT8 model it does serve (python backend) is slower served.
SERVED_ROWS = [
    row("onnxruntime", 1, 30.0),
    row("onnxruntime_int8", 1, 12.0),
    row("eager", 1, 50.0),
    row("triton:m_python", 1, 40.0),
    row("triton:m_python", 1, 60.0, concurrency=2),
    row("triton:m_python_int8", 1, 44.0),
    row("triton:m_python_int8", 1, 70.0, concurrency=2),
]
SERVED = smoke_report(
    m_onnx=("onnx", "fp32", "skipped"),
    m_onnx_int8=("onnx", "int8", "skipped"),
    m_python=("python", "fp32", "passed"),
    m_python_int8=("python", "int8", "passed"),
)


def test_what_no_server_loaded_is_unverified_and_served_numbers_decide() -> None:
    found = gather(SERVED_ROWS, {}, {"accuracy_int8": 0.999}, SERVED)
    target = candidates.target_of(BenchResults(SERVED_ROWS, {}, HOST), SERVED)
    assert target.server and target.text.startswith("tritonserver 2.51.0 (auto server, backends python)")
    latency = selection.decide(found, Objective(name="latency", metric="latency"), server=True)
    assert latency.basis is Basis.SERVED
    assert latency.winner.candidate.model == "m_python" and latency.winner.value == 40.0
    verdicts = {e.candidate.label: (e.verdict.value, e.reason) for e in latency.entries}
    assert verdicts["m_onnx_int8: onnx int8 (onnxruntime_int8)"] == (
        "unverified",
        "the server did not load it: the server has no 'onnxruntime' backend",
    )
    assert verdicts["pytorch fp32 (eager)"] == ("unverified", "eager PyTorch is not a Triton model format")
    assert verdicts["m_python_int8: onnx int8 (onnxruntime_int8)"][0] == "slower"
    # Throughput: the best concurrency of each served model (2 clients x 1 / 60 ms = 33.3/s).
    throughput = selection.decide(found, Objective(name="throughput", metric="throughput"), server=True)
    assert throughput.winner.candidate.model == "m_python" and throughput.winner.load == "c2"
    assert throughput.winner.value == pytest.approx(2000 / 60)


def test_openvino_in_process_is_unverified_for_a_server_and_the_reason_says_why() -> None:
    """The IR with FP16 weights is the fastest in process, but no Triton format of deploy
    serves it: not a choice for the server, and the reason is not a config key to change.
    OpenVINO bf16 and INT8 are served formats the repository lacks here: the reason names
    the keys. In process, OpenVINO INT8 is judged by its own accuracy report, not quantize's."""
    rows = [
        *SERVED_ROWS,
        row("openvino_fp16", 1, 5.0),
        row("openvino_bf16", 1, 6.0),
        row("openvino", 1, 29.0),
        row("openvino_int8", 1, 7.0),
    ]
    found = gather(rows, {}, {"accuracy_int8": 0.999, "accuracy_openvino_int8": 0.985}, SERVED)
    latency = selection.decide(found, Objective(name="latency", metric="latency"), server=True)
    assert latency.winner.candidate.model == "m_python"
    verdicts = {e.candidate.runtime: (e.verdict.value, e.reason) for e in latency.entries}
    assert verdicts["openvino_fp16"] == (
        "unverified",
        "no Triton model format of deploy serves openvino fp16 yet: measured in process only",
    )
    assert verdicts["openvino_bf16"] == (
        "unverified",
        "no model of the repository serves it (stages.triton_config.formats / precisions: openvino bf16)",
    )
    assert verdicts["openvino_int8"] == (
        "unverified",
        "no model of the repository serves it (stages.triton_config.formats / precisions: openvino int8)",
    )
    in_process = selection.decide(found, Objective(name="latency", metric="latency"))
    assert in_process.winner.candidate.runtime == "openvino_fp16"  # ranked with the others
    accurate = selection.decide(found, Objective(name="accurate", metric="latency", min_cosine=0.99))
    assert accurate.winner.candidate.runtime == "onnxruntime_int8"  # int8's accuracy is measured
    rejected = {e.candidate.runtime: e.reason for e in accurate.entries}
    assert "no accuracy measured" in rejected["openvino_bf16"] == rejected["openvino_fp16"]
    assert rejected["openvino_int8"] == "cosine 0.98500 < 0.99"  # its own report's cosine


def test_the_decision_names_the_model_directory_and_the_target() -> None:
    from pathlib import Path

    found = gather(SERVED_ROWS, {}, {"accuracy_int8": 0.999}, SERVED)
    target = candidates.target_of(BenchResults(SERVED_ROWS, {}, HOST), SERVED)
    decisions = [
        selection.decide(found, Objective(name=m, metric=m), server=True) for m in ("latency", "throughput")
    ]
    line = output.headline(decisions, target, Path("model_repository"))
    assert line == (
        "deploy model_repository/m_python for 'latency', 'throughput'; target: tritonserver 2.51.0 "
        "(auto server, backends python) on a test CPU, 2 cores"
    )


def test_without_served_rows_in_process_numbers_decide_among_the_verified_only() -> None:
    rows = [r for r in SERVED_ROWS if r.model is None]
    found = gather(rows, {}, {"accuracy_int8": 0.999}, SERVED)
    latency = selection.decide(found, Objective(name="latency", metric="latency"), server=True)
    assert latency.basis is Basis.IN_PROCESS
    # onnxruntime_int8 is fastest in process; its verified model is m_python_int8.
    assert latency.winner.candidate.model == "m_python_int8" and latency.winner.value == 12.0
    assert all(e.verdict is not Verdict.SELECTED for e in latency.entries if e.candidate.unverified)


def test_with_nothing_verified_nothing_is_selected_and_the_message_says_why() -> None:
    nothing = smoke_report(m_onnx=("onnx", "fp32", "skipped"), m_onnx_int8=("onnx", "int8", "skipped"))
    found = gather(SERVED_ROWS[:3], {}, {"accuracy_int8": 0.999}, nothing)
    decision = selection.decide(found, Objective(name="latency", metric="latency"), server=True)
    assert decision.winner is None
    assert {e.verdict for e in decision.entries} == {Verdict.UNVERIFIED}


def test_the_verdict_compares_the_pick_with_eager_and_fp32_on_its_data() -> None:
    from deploy.stages.select.conclusion import conclusion

    rows = [row("onnxruntime", 1, 2.0), row("onnxruntime_int8", 1, 0.5), row("eager", 1, 4.0)]
    evidence = {"accuracy_int8": "random data: stages.quantize.calibration"}
    found = candidates.gather(BenchResults(rows, {}, HOST), {"accuracy_int8": 0.9991}, None, evidence)
    decision = selection.decide(found, Objective(name="latency", metric="latency"))
    target = candidates.target_of(BenchResults(rows, {}, HOST), None)
    said = conclusion([decision], target, None)
    facts = dict(said.facts)
    assert said.decision.startswith("deploy onnx int8 (onnxruntime_int8) for 'latency'"), said.decision
    assert facts["speed vs eager PyTorch"] == "8.00x (both in process, batch 1: 0.5 vs 4 ms)"
    assert (
        facts["speed vs FP32"] == "4.00x (both in process, batch 1: 0.5 vs 2 ms for onnx fp32 (onnxruntime))"
    )
    assert facts["accuracy vs FP32"] == (
        "worst cosine to FP32 0.99910 (measured on random data: stages.quantize.calibration)"
    )
    assert "verified by no server" in said.target


def test_the_first_screen_names_a_candidate_set_aside_that_read_faster_than_the_pick() -> None:
    """A contended ONNX Runtime row at 1 ms beside a quiet TorchScript pick at 3 ms: the
    report's first screen said only "deploy torchscript", nothing of what was set aside."""
    from deploy.stages.select.conclusion import conclusion

    rows = [row("torchscript", 1, 3.0), contended(row("onnxruntime", 1, 1.0)), row("eager", 1, 4.0)]
    decision = selection.decide(gather(rows, {}, {}), Objective(name="latency", metric="latency"))
    assert decision.winner is not None and decision.winner.candidate.runtime == "torchscript"
    facts = dict(conclusion([decision], candidates.target_of(BenchResults(rows, {}, HOST), None), None).facts)
    said = facts["possibly faster, not judged"]
    assert said.startswith("onnx fp32 (onnxruntime) 1 ms (CONTENDED: load") and said.endswith(": rerun quiet")
    quiet = selection.decide(
        gather([row("torchscript", 1, 3.0), row("eager", 1, 4.0)], {}, {}), decision.objective
    )
    assert "possibly faster, not judged" not in dict(
        conclusion([quiet], candidates.target_of(BenchResults(rows, {}, HOST), None), None).facts
    )


def test_a_served_pick_is_compared_with_eager_in_process_and_with_fp32_served() -> None:
    """Issue 37's report: a served INT8 number (18.7 ms) was divided into an in-process eager
    one (87x). Like with like: the pick's own in-process row against eager's; served FP32
    against served INT8."""
    from deploy.stages.select.conclusion import conclusion

    rows = [*SERVED_ROWS, row("onnxruntime_int8", 1, 49.6), row("triton:m_python_int8", 1, 18.7)]
    rows = [
        r
        for r in rows
        if not (r.subject in ("onnxruntime_int8", "triton:m_python_int8") and r.median_ms in (12.0, 44.0))
    ]
    found = gather(rows, {}, {"accuracy_int8": 0.999}, SERVED)
    decision = selection.decide(found, Objective(name="latency", metric="latency"), min_gain=0, server=True)
    assert decision.winner.candidate.model == "m_python_int8"
    facts = dict(
        conclusion([decision], candidates.target_of(BenchResults(rows, {}, HOST), SERVED), None).facts
    )
    assert facts["speed vs eager PyTorch"] == "1.01x (both in process, batch 1: 49.6 vs 50 ms)"
    assert facts["speed vs FP32"].startswith(
        "2.14x (both served end to end, batch 1: 18.7 vs 40 ms for m_python"
    )


def unstable(r: BenchRow) -> BenchRow:
    return dataclasses.replace(r, stable=False, cv=0.9)


def contended(r: BenchRow) -> BenchRow:
    busy = Environment(2, 2, 0.4, 3.8, 0.6, 0.0, contended=True)
    return dataclasses.replace(r, environment=busy)


def implausible(r: BenchRow) -> BenchRow:
    return dataclasses.replace(r, implausible="batch 1 took 28 ms, more than batch 4's 0.12 ms")


@pytest.mark.parametrize(
    ("flag", "verdict", "said"),
    [
        (unstable, Verdict.UNSTABLE, "did not settle"),
        (contended, Verdict.CONTENDED, "CONTENDED: load 3.8 on 2 cores, others 60 %"),
        (implausible, Verdict.IMPLAUSIBLE, "implausible: batch 1 took 28 ms"),
    ],
)
def test_no_verdict_on_a_flagged_row_and_none_at_all_when_every_row_is(flag, verdict, said) -> None:
    """A faster row that did not settle, was timed beside other processes' work, or
    contradicts its runtime's other rows is shown, not compared, and called possibly
    faster; where every contender is flagged, speed decides nothing: the FP32 reference
    is kept and the headline, the record and the conclusion say so."""
    from deploy.stages.select.conclusion import conclusion
    from deploy.stages.select.output import _status_row, headline

    rows = [row("onnxruntime", 1, 2.0), flag(row("onnxruntime_int8", 1, 0.5)), row("eager", 1, 4.0)]
    found = gather(rows, {}, {"accuracy_int8": 0.999})
    decision = selection.decide(found, Objective(name="latency", metric="latency"))
    assert not decision.withheld and decision.winner.candidate.runtime == "onnxruntime"
    int8 = next(e for e in decision.entries if e.candidate.runtime == "onnxruntime_int8")
    assert int8.verdict is verdict and said in int8.reason and int8.value == 0.5, int8
    assert "possibly faster than the pick (onnx fp32 (onnxruntime)): rerun quiet" in int8.reason
    # The status table's number beside the pick's says it was not compared, and why.
    status = _status_row(int8.candidate, [decision], decision, None)
    assert status[3] == f"0.500 ({verdict.value}, not compared)", status
    pick = next(e for e in decision.entries if e.candidate.runtime == "onnxruntime")
    assert _status_row(pick.candidate, [decision], decision, None)[3] == "2.000"
    noisy = [flag(r) for r in rows]
    found = gather(noisy, {}, {"accuracy_int8": 0.999})
    decision = selection.decide(found, Objective(name="latency", metric="latency"))
    assert decision.withheld == f"every contender's timing is {verdict.value}"
    assert decision.winner.candidate.runtime == "eager"  # the first FP32 contender, not the fastest
    target = candidates.target_of(BenchResults(noisy, {}, HOST), None)
    assert headline([decision], target, None).startswith("NO SPEED VERDICT for 'latency'")
    said_then = conclusion([decision], target, None)
    assert said_then.decision.startswith("NO SPEED VERDICT")
    assert "not a verdict" in dict(said_then.facts)["latency (batch 1)"]
    assert selection.record([decision], found).objectives[0].withheld == decision.withheld


def test_the_chart_keeps_every_label_on_its_own_line() -> None:
    """Eight candidates with long labels and values a thousand times apart: no two texts of
    the chart overlap (measured on the rendered figure), and the small bars stay visible."""
    from deploy.stages.select.chart import figure

    names = ["onnxruntime", "onnxruntime_int8", "eager", "torchscript", "onnxruntime_fp16"]
    rows = [row(n, 1, 0.01 * 10**i) for i, n in enumerate(names)]
    found = gather(rows, {}, {"accuracy_int8": 0.999, "accuracy_fp16": 0.9999})
    decision = selection.decide(found, Objective(name="latency", metric="latency"))
    fig = figure([decision])
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    texts = [t for t in [*ax.get_yticklabels(), *ax.texts] if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(boxes) == 2 * len(decision.entries)
    overlapping = [
        (texts[i].get_text(), texts[j].get_text())
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].overlaps(boxes[j])
    ]
    assert not overlapping, overlapping
    assert ax.get_xscale() == "log"
    assert all(fig.bbox.x0 <= b.x0 and b.x1 <= fig.bbox.x1 for b in boxes), "a text is cut at the edge"
    close = figure(
        [selection.decide(gather(ROWS, {}, {"accuracy_int8": 0.999}), Objective(name="l", metric="latency"))]
    )
    renderer = close.canvas.get_renderer()
    edges = [t.get_window_extent(renderer) for t in close.axes[0].texts]
    assert close.axes[0].get_xscale() == "linear" and all(b.x1 <= close.bbox.x1 for b in edges)
