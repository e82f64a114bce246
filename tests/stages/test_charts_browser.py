"""The bench and select charts in a real browser (headless Chromium): each figure is drawn
as SVG with its text kept as text, and the browser measures every label's box. No two
labels overlap, none runs off the figure, legends sit outside the data, and an axis whose
values span 10x or more is logarithmic (issue 37: overlapping p99 labels, a legend over
the lines, the pick a sliver on a linear 0-1,750 axis). The rows are made up for the
layout only: no number here is a measurement."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from deploy.runtimes.record import BenchRow, ServerShare
from deploy.stages.bench.output import overhead
from deploy.stages.bench.plot import figure as bench_figure
from deploy.stages.bench.plot import plot
from deploy.stages.select import candidates, selection
from deploy.stages.select.chart import chart
from deploy.stages.select.chart import figure as select_figure
from deploy.stages.select.params import Objective
from tests.helpers import HOST, bench_row

MEASURE = """<script>
const texts = [...document.querySelectorAll('svg text')].filter(t => t.textContent.trim());
const frame = document.querySelector('svg').getBoundingClientRect();
const boxes = texts.map(t => { const r = t.getBoundingClientRect();
  return {text: t.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom}; });
const overlaps = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const a = boxes[i], b = boxes[j];
  const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
  const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
  if (w > 1 && h > 1) overlaps.push([a.text, b.text]);
}
const outside = boxes.filter(b => b.left < frame.left - 1 || b.right > frame.right + 1 ||
  b.top < frame.top - 1 || b.bottom > frame.bottom + 1).map(b => b.text);
document.body.dataset.result = JSON.stringify({count: boxes.length, overlaps, outside});
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        pytest.skip("no Chromium here (apt install chromium): the charts' layout is not checked in a browser")
    return found


def measured_in_browser(svg: Path) -> dict[str, Any]:
    """Every label's box in the SVG as Chromium lays it out: overlaps, and any outside."""
    page = svg.with_suffix(".html")
    page.write_text(f"<html><body style='margin:0'>{svg.read_text()}{MEASURE}</body></html>")
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'data-result="([^"]*)"', dom)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def served(model: str, concurrency: int, items: float, p99: float) -> BenchRow:
    share = ServerShare(10, 20, 3000, 20, 100, 100, 100, 1.0, -12614)
    base = bench_row(f"triton:{model}", 1, 1000 * concurrency / items, p99_ms=p99, concurrency=concurrency)
    return dataclasses.replace(base, items_per_s=items, server=share, device="server")


def test_the_bench_chart_reads_right_at_a_glance(tmp_path: Path) -> None:
    rows = [
        bench_row(n, b, ms * b**0.8, p99_ms=ms * b**0.8 * 3)
        for n, ms in (("eager", 1109), ("onnxruntime_int8", 18.7))
        for b in (1, 8)
    ]
    for model, speed in (("resnet50_python", 40), ("resnet50_python_int8", 55), ("resnet50_openvino", 60)):
        rows += [served(model, c, speed * c**0.5, 20 * c) for c in (1, 2, 4, 8)]
    fig = bench_figure(rows)
    plot(rows, tmp_path / "bench.svg", image="svg")  # as the stage saves it, as SVG
    result = measured_in_browser(tmp_path / "bench.svg")
    assert result["count"] > 20 and not result["overlaps"], result["overlaps"]
    assert not result["outside"], result["outside"]
    latency, throughput, concurrency = fig.axes[:3]
    assert latency.get_yscale() == "log"  # 18.7 ms and 3.4 s on one axis
    for ax in (latency, throughput, concurrency):
        legend_box = ax.get_legend().get_window_extent()
        assert legend_box.y1 <= ax.get_window_extent().y0, "a legend over the data"
    assert overhead(-12614) == "below resolution" and overhead(35.2) == "35"


def test_the_select_chart_shows_a_60x_pick_on_a_log_axis(tmp_path: Path) -> None:
    from deploy.runtimes.record import BenchResults

    rows = [
        bench_row("eager", 1, 1109.0),
        bench_row("onnxruntime", 1, 120.0),
        bench_row("onnxruntime_int8", 1, 18.7),
    ]
    rows.append(bench_row("torchscript", 1, 1890.0))  # the largest bar's text is the longest: not cut off
    found = candidates.gather(BenchResults(rows, {}, HOST), {"accuracy_int8": 0.999}, None)
    decisions = [selection.decide(found, Objective(name="latency", metric="latency"))]
    assert select_figure(decisions).axes[0].get_xscale() == "log"
    chart(decisions, tmp_path / "select.svg", image="svg")  # as the stage saves it, as SVG
    result = measured_in_browser(tmp_path / "select.svg")
    assert result["count"] >= 6 and not result["overlaps"] and not result["outside"], result
