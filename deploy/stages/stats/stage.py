"""stats: what the model costs, read from its ONNX graph at one shape of the shape spec:
parameters, FLOPs, bytes moved, arithmetic intensity, a per-op-type breakdown and, for
each declared hardware target, whether each op type is compute- or memory-bound and a
roofline lower bound on the time per inference (roofline.py beside it has the method).

Targets are declared, not measured: peak FLOP/s for the precision you deploy in and the
memory bandwidth, from the vendor's data sheet.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from deploy.domain.artifacts import ONNX, STATS
from deploy.pipeline.graph.contract import Artifact, Cell, Phase, Section, StageContext, StageSpec
from deploy.stages.stats.params import StatsParams

if TYPE_CHECKING:  # onnx-tool: imported when the stage runs
    from deploy.stages.stats.roofline import OpRow, Totals


def run(ctx: StageContext, params: StatsParams) -> None:
    import numpy as np

    from deploy.gates import references
    from deploy.stages.stats import roofline

    rng = np.random.default_rng(0)
    feeds = references.make_inputs(ctx.config, params.shape, rng)
    nodes = roofline.count(ctx.input(ONNX), feeds)
    targets = [roofline.Roof(t.name, t.peak_tflops * 1e12, t.bandwidth_gbps * 1e9) for t in params.targets]
    batch = _batch(ctx, params)
    totals, ops = roofline.totals(nodes, targets), roofline.by_op_type(nodes, targets)
    stats = {
        "shape": params.shape,
        "batch": batch,
        "totals": asdict(totals),
        "op_types": [asdict(row) for row in ops],
        "targets": [t.model_dump() for t in params.targets],
    }
    ctx.output(STATS).write_text(json.dumps(stats, indent=1))
    ctx.record("stats", asdict(totals))
    ctx.headline(_headline(totals, batch))
    _report(ctx, totals, params.shape, batch)
    _op_table(ctx, ops, list(totals.targets))


def _batch(ctx: StageContext, params: StatsParams) -> int:
    first = ctx.config.inputs[0]
    return first.shape(params.shape)[0] if ctx.config.batch_dim is not None else 1


def si(value: float, unit: str) -> str:
    """4.1e9, 'FLOP' -> '4.1 GFLOP'; 1.8e-8, 's' -> '18.2 ns'."""
    prefixes = [
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1, ""),
        (1e-3, "m"),
        (1e-6, "µ"),
        (1e-9, "n"),
    ]
    scale, prefix = next(((s, p) for s, p in prefixes if abs(value) >= s), prefixes[-1])
    return f"{value / scale:.3g} {prefix}{unit}" if value else f"0 {unit}"


def _headline(totals: Totals, batch: int) -> str:
    return f"{si(totals.params, 'params')}, {si(totals.flops / batch, 'FLOP')}/item, {totals.intensity:.1f} FLOP/byte"


def _report(ctx: StageContext, totals: Totals, shape: str, batch: int) -> None:
    rows: list[list[Cell]] = [
        ["parameters", f"{totals.params:,}"],
        ["nodes", totals.nodes],
        ["FLOPs per inference", f"{si(totals.flops, 'FLOP')} ({si(totals.flops / batch, 'FLOP')} per item)"],
        ["bytes moved (layer by layer)", si(totals.bytes, "B")],
        ["arithmetic intensity", f"{totals.intensity:.1f} FLOP/byte"],
    ]
    for name, t in totals.targets.items():
        rows.append(
            [
                f"roofline on {name}",
                f"{si(t.roofline_s, 's')} (ridge {t.ridge_flops_per_byte:.3g} FLOP/byte; "
                f"{100 * t.memory_bound_time_share:.0f} % of it memory-bound)",
            ]
        )
    ctx.report_table(f"Model statistics at the '{shape}' shape (batch {batch})", ["quantity", "value"], rows)


def _op_table(ctx: StageContext, ops: list[OpRow], targets: list[str]) -> None:
    columns = ["op type", "count", "params", "FLOPs", "bytes moved", "FLOP/byte"]
    columns += [f"{n}: bound, roofline time" for n in targets]
    body: list[list[Cell]] = [
        [
            r.op_type,
            r.count,
            f"{r.params:,}",
            si(r.flops, "FLOP"),
            si(r.bytes, "B"),
            f"{r.intensity:.1f}",
            *[f"{r.targets[n].bound}, {si(r.targets[n].roofline_s, 's')}" for n in targets],
        ]
        for r in ops
    ]
    ctx.report_table(
        "Per op type", columns, body, note="bytes: each node's inputs, weights and outputs once (no fusion)"
    )


SPEC = StageSpec(
    phase=Phase.ANALYZE,
    name="stats",
    version=1,
    params=StatsParams,
    inputs=("onnx",),
    outputs=(Artifact("stats", filename="stats.json"),),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx-tool", "onnx", "numpy"),
    description="parameters, FLOPs, bytes, arithmetic intensity per op type; roofline per declared hardware target",
    timeout_s=600,
)
