"""Parity between a runtime's outputs and the golden reference, with one vocabulary
of thresholds (atol / rtol / min_cosine) shared by every transforming stage."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.config import Label
from pipeline.errors import StageFailed
from stages._golden import Case
from stages._tolerance import Tolerance


def metrics(actual: np.ndarray, ref: np.ndarray, tol: Tolerance) -> dict[str, Any]:
    if actual.shape != ref.shape:
        return {"passed": False, "error": f"shape {list(actual.shape)} != reference {list(ref.shape)}"}
    a, r = actual.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    diff = np.abs(a - r)
    rel = diff / np.maximum(np.abs(r), np.finfo(np.float32).tiny)
    norm = float(np.linalg.norm(a) * np.linalg.norm(r))
    cosine = float(a @ r / norm) if norm > 0 else float(np.array_equal(a, r))
    within = bool(np.all(diff <= tol.atol + tol.rtol * np.abs(r))) if a.size else True
    return {
        "max_abs": float(diff.max(initial=0.0)),
        "mean_abs": float(diff.mean()) if a.size else 0.0,
        "max_rel": float(rel.max(initial=0.0)),
        "mean_rel": float(rel.mean()) if a.size else 0.0,
        "cosine": cosine,
        "within_tolerance": within,
        "passed": within and cosine >= tol.min_cosine,
    }


def compare(
    results: dict[Label, dict[str, np.ndarray]], golden: dict[Label, Case], tol: Tolerance
) -> dict[str, dict[str, dict[str, Any]]]:
    """label -> output -> metrics, for every recorded shape and output."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for label, case in golden.items():
        got = results[label]
        table[label] = {
            name: metrics(got[name], ref, tol) if name in got else {"passed": False, "error": "missing output"}
            for name, ref in case.outputs.items()
        }
    return table


def failures(table: dict[str, dict[str, dict[str, Any]]], tol: Tolerance) -> list[str]:
    return [
        f"{label}/{name}: " + (m.get("error") or _numbers(m, tol))
        for label, outs in table.items()
        for name, m in outs.items()
        if not m["passed"]
    ]


def _numbers(m: dict[str, Any], tol: Tolerance) -> str:
    """Names the threshold(s) broken, with the numbers."""
    broken = []
    if not m["within_tolerance"]:
        broken.append(f"|diff| > atol {tol.atol:g} + rtol {tol.rtol:g}*|ref| (max_abs {m['max_abs']:.3g}, max_rel {m['max_rel']:.3g})")
    if m["cosine"] < tol.min_cosine:
        broken.append(f"cosine {m['cosine']:.9g} < min_cosine {tol.min_cosine:g}")
    return "; ".join(broken)


def gate(what: str, table: dict[str, dict[str, dict[str, Any]]], tol: Tolerance) -> None:
    bad = failures(table, tol)
    if bad:
        raise StageFailed(f"{what} parity failed: " + "; ".join(bad))


def headline(table: dict[str, dict[str, dict[str, Any]]]) -> str:
    rows = [m for outs in table.values() for m in outs.values() if "max_abs" in m]
    if not rows:
        return "no comparable outputs"
    return f"max|Δ| {max(m['max_abs'] for m in rows):.2g}, min cos {min(m['cosine'] for m in rows):.6f}"


def report_rows(what: str, table: dict[str, dict[str, dict[str, Any]]]) -> list[list[Any]]:
    """Rows for the run report: one per shape and output."""
    return [
        [what, label, name, m.get("error", "")] if "max_abs" not in m else
        [what, label, name, f"{m['max_abs']:.3g}", f"{m['mean_abs']:.3g}", f"{m['max_rel']:.3g}", f"{m['cosine']:.7f}", "yes" if m["passed"] else "NO"]
        for label, outs in table.items() for name, m in outs.items()
    ]


REPORT_COLUMNS = ["runtime", "shape", "output", "max |Δ|", "mean |Δ|", "max rel", "cosine", "passed"]
