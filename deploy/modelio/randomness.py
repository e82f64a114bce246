"""Whether the model's forward is a function of its inputs. A forward that draws noise
(ViT-MAE's random masking, dropout forced on, a sampler) answers the same inputs
differently on every call: no export can match it, and a batch-independence or parity
measurement on it measures the noise. Golden calls eager twice on the same inputs before
anything is exported; where the answers differ, the random ops the forward ran are found
(ATen tags them `nondeterministic_seeded`) with the source lines that called them.

Imported only from inside stage run functions: it imports torch.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from deploy.pipeline.errors import StageFailed

# Two calls of a deterministic CPU forward are bitwise equal; allow float noise of a
# kernel that splits work by thread (well below any parity tolerance).
SAME = 1e-6
# A fair coin falls under all three as it fell first 1 time in 8 (at batch 1; rarer with more samples).
RESEEDS = (1, 2, 3)
_OWN = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))


_NOISE = (
    "; it ran {}. No export can match a forward that draws noise, and parity or batch independence measured "
    "on it measures the noise. Ways out: pass the noise as an input (e.g. ViT-MAE's `noise=`: declare it under "
    "inputs), or seed it inside forward with a fixed torch.Generator. deploy already calls model.eval(): a "
    "dropout that still draws is one that ignores it (F.dropout(x, training=True): pass training=self.training)"
)
_STATE = (
    "; it ran no random op: something the forward keeps between calls changed its answer (a buffer or an "
    "attribute it updates, such as a call counter or a cache, or a global). No export can match a forward whose "
    "answer depends on how often it ran: keep the state out of forward, or pass it in as an input"
)


class NotDeterministic(StageFailed):
    """The model's forward answers the same inputs differently."""


def repeat_spread(first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Per output, the largest difference between two calls (NaN where they differ only
    in NaN placement: inf)."""
    return {name: _max_abs(first[name], second[name]) for name in first}


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    x, y = a.astype(np.float64), b.astype(np.float64)
    if not np.array_equal(np.isnan(x), np.isnan(y)):
        return float("inf")
    with np.errstate(invalid="ignore"):  # inf - inf: the same infinity twice is no difference
        diff = np.where(x == y, 0.0, np.abs(x - y))
    return float(np.nan_to_num(diff, nan=0.0).max(initial=0.0))


def refuse_noise(
    spread: Mapping[str, float], first: Mapping[str, np.ndarray], call: Callable[[], Mapping[str, np.ndarray]]
) -> None:
    """NotDeterministic naming the outputs, the random ops and the ways out, where two
    calls differed by more than float noise. Where they agreed, calls under other seeds
    decide (a coin that fell the same way twice: `rand(1) > 0.5` at batch 1); a forward
    that draws nothing answers them alike. The random ops are looked for only then: the
    dispatch mode that finds them imports sympy, and leaves torch so that an uncaught
    Ctrl-C exits 1, not 130."""
    moved = _moved(spread, first) or _reseeded(first, call)
    if not moved:
        return
    ops = random_ops(call)
    raise NotDeterministic(
        "the model's forward is not deterministic: two calls on the same inputs differ in "
        + ", ".join(f"{n} (max |Δ| {d:.3g})" for n, d in moved.items())
        + (_NOISE.format(", ".join(ops[:6])) if ops else _STATE)
    )


def _moved(spread: Mapping[str, float], first: Mapping[str, np.ndarray]) -> dict[str, float]:
    return {n: d for n, d in spread.items() if d > SAME * max(_scale(first[n]), 1.0)}


def _reseeded(
    first: Mapping[str, np.ndarray], call: Callable[[], Mapping[str, np.ndarray]]
) -> dict[str, float]:
    """The outputs that move when the forward is called under other seeds (the caller's
    random state kept as it was); none where one more call leaves the generator as it was,
    which a forward that draws nothing does (one call, not three)."""
    with torch.random.fork_rng():
        before = torch.get_rng_state()
        again = call()
        if torch.equal(before, torch.get_rng_state()):
            return {}
        if moved := _moved(repeat_spread(first, again), first):
            return moved
        for seed in RESEEDS:
            torch.manual_seed(seed)
            if moved := _moved(repeat_spread(first, call()), first):
                return moved
    return {}


def _scale(array: np.ndarray) -> float:
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    return float(np.abs(finite.astype(np.float64)).max(initial=0.0))


def random_ops(call: Callable[[], object]) -> list[str]:
    """The random ops `call` runs, each with the source line outside torch and deploy
    that called it, in the order first seen."""
    found: dict[str, None] = {}

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if torch.Tag.nondeterministic_seeded in func.tags:
                found[f"{func.overloadpacket.__name__} ({_caller()})"] = None
            return func(*args, **(kwargs or {}))

    try:
        with Spy(), torch.no_grad():
            call()
    except Exception:  # the first two calls ran: whatever this one did, say what was seen
        pass
    return list(found)


def _caller() -> str:
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_OWN)]
    if not frames:
        return "inside torch"
    last = frames[-1]
    return f"{last.filename}:{last.lineno}: {(last.line or '').strip()}"
