"""The HTML run report: written by every run (cold and fully cached), self-contained,
showing every stage, each stage's tables and its plots; and it renders in a real
headless browser."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy.pipeline.graph.project import load_project
from deploy.pipeline.process.runner import REPORT_FILE
from tests.helpers import run

STAGES = {
    "trace": {},
    "export": {},
    "stats": {},
    "validate": {"runtimes": ["onnxruntime", "torchscript"]},
    "bench": {
        "runtimes": ["eager", "onnxruntime"],
        "batches": [1, 4],
        "warmup_ms": 10,
        "duration_s": 0.05,
        "iterations": 5,
    },
}
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,2000",
]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    import yaml

    from tests.helpers import tiny_dict

    tmp = tmp_path_factory.mktemp("report")
    data = tiny_dict(tmp)
    data["stages"] = STAGES
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run(path)
    return path


def _html(config: Path) -> str:
    return (load_project(config).run_dir / REPORT_FILE).read_text()


def test_report_is_self_contained_with_every_stage_table_and_plot(report):
    html = _html(report)
    for stage in STAGES:
        assert f"<td>{stage}</td>" in html
    for title in (
        "Model statistics at the",
        "Per op type",
        "Parity vs the eager reference",
        "Latency and throughput",
    ):
        assert title in html
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    assert len(images) == 1 and base64.b64decode(images[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"(src|href)=['\"](https?:|//|/)", html), (
        "the report must not load anything from elsewhere"
    )


def test_a_cached_run_rewrites_the_report_with_cached_statuses(report):
    html_path = load_project(report).run_dir / REPORT_FILE
    html_path.unlink()
    run(report)
    html = html_path.read_text()
    assert html.count("<span class='cached'>cached</span>") == len(STAGES) + 1  # and the implied golden
    assert "Per op type" in html and "data:image/png;base64," in html


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(
    _chromium() is None, reason="needs Chromium (scripts/setup.sh --tests installs Debian's chromium)"
)
def test_report_renders_in_headless_chromium(report, tmp_path):
    """A screenshot of the page: not blank, and as tall as the content (the plot drawn)."""
    from PIL import Image, ImageStat

    shot = tmp_path / "report.png"
    page = (load_project(report).run_dir / REPORT_FILE).absolute()
    command = [
        str(_chromium()),
        *CHROMIUM_FLAGS,
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        page.as_uri(),
    ]
    subprocess.run(command, capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("L")
    assert image.size == (1280, 2000)
    dark = sum(1 for p in image.getdata() if p < 128) / (image.width * image.height)
    assert 0.01 < dark < 0.5, f"{dark:.3%} dark pixels: the page did not render its text and plot"
    # The plot sits below the tables: the lower part of the page must have content too.
    lower = image.crop((0, image.height // 3, image.width, 2 * image.height // 3))
    assert ImageStat.Stat(lower).stddev[0] > 20
