"""Counts an ONNX graph at concrete input shapes and places it on a roofline.

onnx-tool infers every tensor's shape and counts each node's multiply-accumulates
(FLOPs = 2 × MACs, its convention) and parameters. Bytes moved by a node are its input,
weight and output tensors each read or written once: what a layer-by-layer roofline
assumes (no fusion, no cache reuse), so an upper bound on traffic. A node is
memory-bound on a target when its FLOPs per byte fall below the target's ridge point
(peak FLOP/s ÷ bandwidth); its roofline time is max(FLOPs ÷ peak, bytes ÷ bandwidth).
Imports onnx-tool (and onnx, numpy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx_tool


@dataclass(frozen=True)
class Roof:
    name: str
    flops_per_s: float
    bytes_per_s: float

    @property
    def ridge(self) -> float:
        return self.flops_per_s / self.bytes_per_s


@dataclass(frozen=True)
class NodeCount:
    op_type: str
    flops: float
    params: int
    bytes: int


def count(path: Path, feeds: dict[str, np.ndarray]) -> list[NodeCount]:
    graph = onnx_tool.Model(str(path)).graph
    graph.shape_infer(feeds)
    graph.profile()
    return [_node(graph, node) for node in graph.nodemap.values()]


def _node(graph: onnx_tool.Graph, node: onnx_tool.Node) -> NodeCount:
    tensors = [graph.tensormap[name] for name in (*node.input, *node.output) if name in graph.tensormap]
    moved = sum(int(t.get_memsize()) for t in tensors)
    return NodeCount(node.op_type, 2.0 * float(node.macs[0]), int(node.params), moved)  # [1]: backward MACs


def roofline_s(node: NodeCount, target: Roof) -> float:
    return max(node.flops / target.flops_per_s, node.bytes / target.bytes_per_s)


@dataclass(frozen=True)
class OpOnTarget:
    bound: str  # "compute" or "memory": the op type's intensity against the target's ridge
    roofline_s: float


@dataclass(frozen=True)
class OpRow:
    """One op type's counts, and per target its roofline time and bound."""

    op_type: str
    count: int
    params: int
    flops: float
    bytes: int
    intensity: float  # FLOPs per byte moved
    targets: dict[str, OpOnTarget]


@dataclass(frozen=True)
class TotalOnTarget:
    ridge_flops_per_byte: float
    roofline_s: float
    memory_bound_time_share: float


@dataclass(frozen=True)
class Totals:
    nodes: int
    params: int
    flops: float
    bytes: int
    intensity: float
    targets: dict[str, TotalOnTarget]


def by_op_type(nodes: list[NodeCount], targets: list[Roof]) -> list[OpRow]:
    """One row per op type, most FLOPs first."""
    rows = [_op_row(op, [n for n in nodes if n.op_type == op], targets) for op in {n.op_type for n in nodes}]
    return sorted(rows, key=lambda r: (-r.flops, r.op_type))


def _op_row(op: str, mine: list[NodeCount], targets: list[Roof]) -> OpRow:
    flops, moved = sum(n.flops for n in mine), sum(n.bytes for n in mine)
    intensity = flops / moved if moved else 0.0
    on = {
        t.name: OpOnTarget(
            "compute" if intensity >= t.ridge else "memory", sum(roofline_s(n, t) for n in mine)
        )
        for t in targets
    }
    return OpRow(op, len(mine), sum(n.params for n in mine), flops, moved, intensity, on)


def totals(nodes: list[NodeCount], targets: list[Roof]) -> Totals:
    flops, moved = sum(n.flops for n in nodes), sum(n.bytes for n in nodes)
    on = {t.name: _total_on(nodes, t) for t in targets}
    params = sum(n.params for n in nodes)
    return Totals(len(nodes), params, flops, moved, flops / moved if moved else 0.0, on)


def _total_on(nodes: list[NodeCount], target: Roof) -> TotalOnTarget:
    times = [(roofline_s(n, target), n) for n in nodes]
    total = sum(t for t, _ in times)
    memory = sum(t for t, n in times if (n.bytes and n.flops / n.bytes < target.ridge) or not n.flops)
    return TotalOnTarget(target.ridge, total, memory / total if total else 0.0)
