"""End to end with real ImageNet weights: configs/mobilenetv2.yaml publishes an image
service, smoke checks it against torchvision, and `deploy infer` on a photo from
scikit-learn answers a label a person would give it."""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT, run_cli
from tests.matrix.runs import MatrixRun, check_the_run_passed, matrix_fixture

pytestmark = [pytest.mark.matrix, pytest.mark.slow, pytest.mark.triton]


run = matrix_fixture("mobilenetv2")


def test_the_run_passed(run: MatrixRun) -> None:
    check_the_run_passed(run)


def _photos(directory):
    """The photos smoke sends (scikit-learn's, as JPEG and PNG), as files for `deploy infer`."""
    from deploy.serving.service_client import samples

    written = []
    for sample in samples("image", None):
        written.append(directory / sample.name)
        written[-1].write_bytes(sample.data)
    return written


def _top(stdout: str) -> list[str]:
    """The rank-1 label of each image `deploy infer` printed."""
    return [block.split("\n", 1)[0].rsplit(" ", 1)[0] for block in stdout.split("  1. ")[1:]]


def test_the_imagenet_service_names_what_the_photo_shows(run: MatrixRun, tmp_path) -> None:
    from deploy.serving.launch import serve_repository
    from deploy.serving.server_spec import ServerSpec

    summary = run.summary()
    smoke = next(s for s in summary["stages"] if s["stage"] == "smoke")["metrics"]["smoke"]["models"]
    service = smoke["mobilenetv2_python_ensemble"]["service"]
    assert service["top1_agreement"] == 1.0 and service["min_cosine"] > 0.999
    assert service["answers"]["grpc"][0].startswith("china.jpg: palace ")
    _, flower = _photos(tmp_path)
    (tmp_path / "server").mkdir()
    with serve_repository(ServerSpec(), run.dir / "model_repository", tmp_path / "server") as served:
        printed = {
            protocol: run_cli(
                "infer", "--url", url, "--protocol", protocol, "--sample", "--image", str(flower)
            )
            for protocol, url in (("http", served.server.http), ("grpc", served.server.grpc))
        }
    assert all(p.returncode == 0 for p in printed.values()), {k: p.stderr for k, p in printed.items()}
    # china.jpg is a temple: torchvision's own weights say palace (0.74), then monastery.
    assert _top(printed["http"].stdout) == _top(printed["grpc"].stdout)
    assert _top(printed["http"].stdout)[0] == "palace", printed["http"].stdout
    assert printed["http"].stdout.count("  5. ") == 2
    # What the README shows for the photo: the same two first labels, and every label it
    # shows that is printed scored within 0.05 (ONNX Runtime's threads and versions move
    # the scores by about 0.02; labels 3 to 5 are close enough to swap).
    shown = _ranks(README_INFER.search((ROOT / "README.md").read_text()).group(1))
    got = dict(_ranks(printed["http"].stdout.split("\n\n")[0]))
    assert list(got)[:2] == [label for label, _ in shown[:2]], (got, shown)
    assert all(abs(got[label] - score) <= 0.05 for label, score in shown if label in got), (got, shown)


README_INFER = re.compile(r"deploy infer --sample.*?\n(china.jpg .*?)\n```", re.S)


def _ranks(block: str) -> list[tuple[str, float]]:
    """`  1. palace 0.707` lines: (label, score) in rank order."""
    return [(m[1], float(m[2])) for m in re.finditer(r"^  \d\. (.+) ([0-9.]+)$", block, re.M)]
