"""Progress of long stage work (bench cells, calibration batches, smoke models, search
configurations, remote transfers): a stage says `ctx.progress(done, total, what)`, the
event crosses from the stage's process to the runner's reporter (the same pipe as the
outcome), throttled at the source so that a tight loop costs nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# At most this often per stage; the last step (done == total) always goes.
EVERY_S = 0.5


# A stage silent for this long gets a heartbeat event (how long it has been running).
HEARTBEAT_S = 10.0


@dataclass(frozen=True)
class Progress:
    stage: str
    done: int
    total: int | None  # None: how much remains is not known
    what: str = ""  # the step under way, e.g. "onnxruntime b8"
    running_s: float | None = None  # set on a heartbeat: no step to report, still running


def heartbeat(stage: str, running_s: float) -> Progress:
    return Progress(stage, 0, None, f"running for {running_s:.0f} s", running_s)


Sink = Callable[[Progress], None]


class Throttled:
    """A sink that passes an event on at most every EVERY_S (and every final one)."""

    def __init__(self, stage: str, sink: Sink) -> None:
        self.stage, self.sink, self.last = stage, sink, 0.0

    def __call__(self, done: int, total: int | None, what: str) -> None:
        now = time.monotonic()
        if now - self.last >= EVERY_S or (total is not None and done >= total):
            self.last = now
            self.sink(Progress(self.stage, done, total, what))
