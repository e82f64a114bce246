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
from typing import Any

import numpy as np
import onnx_tool


@dataclass(frozen=True)
class Target:
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


def _node(graph: Any, node: Any) -> NodeCount:
    tensors = [graph.tensormap[name] for name in (*node.input, *node.output) if name in graph.tensormap]
    moved = sum(int(t.get_memsize()) for t in tensors)
    return NodeCount(node.op_type, 2.0 * float(node.macs[0]), int(node.params), moved)  # [1]: backward MACs


def roofline_s(node: NodeCount, target: Target) -> float:
    return max(node.flops / target.flops_per_s, node.bytes / target.bytes_per_s)


def by_op_type(nodes: list[NodeCount], targets: list[Target]) -> list[dict[str, Any]]:
    """One row per op type, most FLOPs first: counts, and per target the roofline time
    and whether the op type's own intensity is below the ridge."""
    rows = []
    for op in sorted({n.op_type for n in nodes}):
        mine = [n for n in nodes if n.op_type == op]
        flops, moved = sum(n.flops for n in mine), sum(n.bytes for n in mine)
        row: dict[str, Any] = {
            "op_type": op,
            "count": len(mine),
            "params": sum(n.params for n in mine),
            "flops": flops,
            "bytes": moved,
            "intensity": flops / moved if moved else 0.0,
            "targets": {},
        }
        for target in targets:
            bound = "compute" if row["intensity"] >= target.ridge else "memory"
            row["targets"][target.name] = {
                "bound": bound,
                "roofline_s": sum(roofline_s(n, target) for n in mine),
            }
        rows.append(row)
    return sorted(rows, key=lambda r: -r["flops"])


def totals(nodes: list[NodeCount], targets: list[Target]) -> dict[str, Any]:
    flops, moved = sum(n.flops for n in nodes), sum(n.bytes for n in nodes)
    found: dict[str, Any] = {
        "nodes": len(nodes),
        "params": sum(n.params for n in nodes),
        "flops": flops,
        "bytes": moved,
        "intensity": flops / moved if moved else 0.0,
        "targets": {},
    }
    for target in targets:
        times = [(roofline_s(n, target), n) for n in nodes]
        total = sum(t for t, _ in times)
        memory = sum(t for t, n in times if (n.bytes and n.flops / n.bytes < target.ridge) or not n.flops)
        found["targets"][target.name] = {
            "ridge_flops_per_byte": target.ridge,
            "roofline_s": total,
            "memory_bound_time_share": memory / total if total else 0.0,
        }
    return found
