"""The smoke stage's service check on a real tritonserver: PNG bytes through
pre -> model -> post, compared with torchvision's transforms around the eager model,
on the tiny CNN trained on scikit-learn's digits (real weights: the labels mean something)."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from tests.helpers import DIGIT_NAMES, digits_service, output_path, run, run_cli

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def service(tmp_path_factory, digits_checkpoint):
    work = tmp_path_factory.mktemp("service")
    config, truth = digits_service(work, digits_checkpoint[0])
    result = run_cli("run", str(config), "--to", "smoke", cwd=work)
    summary = json.loads((work / "runs" / "tiny" / "summary.json").read_text())
    return work, config, truth, result, summary


def _smoke(summary):
    return next(s for s in summary["stages"] if s["stage"] == "smoke")["metrics"]["smoke"]["models"]


def test_the_ensemble_answers_what_torchvision_and_the_eager_model_answer(service):
    work, _, truth, result, summary = service
    assert result.returncode == 0, result.stderr[-3000:]
    models = _smoke(summary)
    ensemble = models["tiny_python_ensemble"]
    assert ensemble["status"] == "passed" and ensemble["format"] == "ensemble"
    check = ensemble["service"]
    assert (
        check["samples"] == sorted(truth) and check["top1_agreement"] == 1.0 and check["min_cosine"] > 0.999
    )
    assert check["answers"]["http"] == check["answers"]["grpc"]  # one server, one computation
    # Against the reference only the top-1: lower ranks may tie at the printed precision.
    assert [a.split(",")[0] for a in check["answers"]["http"]] == [
        r.split(",")[0] for r in check["reference"]
    ]
    # Real weights: the served top-1 names the digit drawn (the CNN is ~90 % accurate).
    top1 = {line.split(": ")[0]: line.split(": ")[1].split(" ")[0] for line in check["answers"]["http"]}
    right = sum(top1[name] == DIGIT_NAMES[digit] for name, digit in truth.items())
    assert right >= 8, check["answers"]["http"]
    assert models["tiny_pre"]["status"] == models["tiny_post"]["status"] == "passed"
    # Concurrent clients, each sending its own digits (requests of 1 and 2 PNGs), each
    # answered as its own request alone: the trained model's top-1 per digit, not a neighbour's.
    traffic = ensemble["traffic"]
    assert traffic["distinct"] >= 4 and sorted(set(traffic["batches"])) == [1, 2]
    assert traffic["mismatch_count"] == 0 and traffic["clients"] == 8, traffic
    report = (work / "runs" / "tiny" / "report.html").read_text()
    assert "Published services: real inputs end to end" in report


def test_the_repository_holds_the_service_as_triton_reads_it(service):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    work = service[0]
    repo = work / "model_repository"
    parsed = {
        name: text_format.Parse((repo / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        for name in ("tiny_pre", "tiny_post", "tiny_python_ensemble")
    }
    ensemble = parsed["tiny_python_ensemble"]
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 16
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [
        "tiny_pre",
        "tiny_python",
        "tiny_post",
    ]
    assert [i.name for i in ensemble.input] == ["image"] and [o.name for o in ensemble.output] == [
        "scores",
        "classes",
        "labels",
    ]
    assert list(parsed["tiny_pre"].output[0].dims) == [1, 8, 8]
    assert (repo / "tiny_post" / "1" / "labels.txt").read_text().split() == list(DIGIT_NAMES)


def test_a_preprocessing_that_drifts_from_torchvision_fails_the_stage(service, tmp_path):
    """The served pre model scales pixels by half: the check must catch it, naming the ensemble."""
    from deploy.pipeline.errors import StageFailed
    from deploy.pipeline.graph.contract import StageContext
    from deploy.pipeline.graph.project import load_project
    from deploy.stages.smoke import stage as smoke

    work, config, _, _, _ = service
    results = run(config, stop="triton_config")
    repo = tmp_path / "repository"
    shutil.copytree(output_path(config, results, "triton_config", "repository"), repo)
    pre = repo / "tiny_pre" / "1" / "model.py"
    source = pre.read_text()
    drifted = source.replace('np.float32(spec["scale"])', 'np.float32(spec["scale"] / 2)')
    assert drifted != source
    pre.chmod(0o644)
    pre.write_text(drifted)
    golden = output_path(config, results, "golden", "golden")
    scratch = tmp_path / "work"
    scratch.mkdir()
    outputs = {a.name: a for a in smoke.SPEC.outputs}
    ctx = StageContext(
        load_project(config).config,
        {"repository": repo, "golden": golden},
        scratch,
        outputs,
        logging.getLogger("t"),
    )
    params = smoke.SmokeParams.model_validate(
        {"service": {"samples": str(work / "digits")}, "batching_requests": 0}
    )
    # Halved pixels may also move some top-1 classes (how many depends on the CPU the digits
    # model was trained on): the scores' cosine is what must be caught, naming the ensemble.
    drift = r"tiny_python_ensemble: http: (top-1 agreement [\d.]+ < 1\.0; http: )?top-k scores cosine 0\.\d+ < 0\.999"
    with pytest.raises(StageFailed, match=drift):
        smoke.run(ctx, params)
