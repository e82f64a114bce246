"""The run report in a real browser (headless Chromium): its first screen holds the
conclusion (what to deploy, for which target, how fast against eager and FP32, how accurate
on which data) and the chart it rests on; a cached rerun says when the results were made
and how long that took, not the milliseconds the rerun spent. The screenshot of the first
screen is kept beside the run (first-screen.png) for a reader of the test's output."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import deploy
from tests.helpers import tiny_dict

SCREEN = (1280, 800)
FAST = {"warmup_ms": 10, "duration_s": 0.05, "iterations": 5, "batches": [1, 4]}
MEASURE = """<script>
const box = (sel) => { const e = document.querySelector(sel); return e ? e.getBoundingClientRect() : null; };
const v = box('#conclusion'), c = box('img.chart');
document.body.dataset.conclusion = v ? `${Math.round(v.top)},${Math.round(v.bottom)}` : 'none';
document.body.dataset.chart = c ? `${Math.round(c.top)},${Math.round(c.bottom)}` : 'none';
</script></body>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        pytest.skip("no Chromium here (apt install chromium): the report's layout is not checked")
    return found


def _browser(html: Path, *args: str) -> subprocess.CompletedProcess[str]:
    width, height = SCREEN
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    command += [f"--window-size={width},{height}", *args, html.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("report")
    data = tiny_dict(work)
    data["stages"] = {"export": {}, "validate": {"runtimes": ["onnxruntime"]}, "bench": FAST, "select": {}}
    assert deploy.load(data).run().ok
    return work / "runs" / "tiny" / "report.html"


def test_the_first_screen_holds_the_conclusion_and_its_chart(report: Path) -> None:
    measured = report.with_name("measured.html")
    measured.write_text(report.read_text().replace("</body>", MEASURE))
    dom = _browser(measured, "--dump-dom").stdout
    box = re.search(r'data-conclusion="(-?\d+),(-?\d+)"', dom)
    chart = re.search(r'data-chart="(-?\d+),(-?\d+)"', dom)
    assert box and chart, dom[-2000:]
    height = SCREEN[1]
    assert 0 <= int(box.group(1)) < int(box.group(2)) <= height, box.groups()
    assert int(chart.group(1)) < height, chart.groups()  # the chart starts on the first screen
    text = report.read_text()
    assert text.index("id='conclusion'") < text.index("<h2>Stages</h2>")  # details come after
    for fact in ("speed vs eager PyTorch", "speed vs FP32", "accuracy vs FP32"):
        assert f"<th>{fact}</th>" in text


def test_a_screenshot_of_the_first_screen_is_taken(report: Path) -> None:
    shot = report.with_name("first-screen.png")
    done = _browser(report, f"--screenshot={shot}")
    assert shot.is_file(), done.stderr[-2000:]
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])  # the PNG's IHDR
    assert (width, height) == SCREEN


def test_a_cached_rerun_says_when_its_results_were_made(report: Path) -> None:
    config = report.parents[0] / "config.yaml"
    result = deploy.load(config).run()
    assert {s.status.value for s in result.stages.values()} == {"cached"}
    meta = re.search(r"<p class='meta'>(every stage from the cache: made [^<]*)</p>", report.read_text())
    assert meta and " s of stage time; checked " in meta.group(1), report.read_text()[:3000]
