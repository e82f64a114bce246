"""Whether a bench row can be right (runtimes/plausibility.py): made-up rows shaped like
the parked-thread measurement the workplace recorded (8x8 CNN, 2 cores, loaded: 28 ms at
batch 1 with 2 threads, 0.029 ms with 1, batch 4 unaffected)."""

from __future__ import annotations

import dataclasses

from deploy.runtimes import plausibility
from deploy.runtimes.contention import Environment
from tests.helpers import bench_row

QUIET = Environment(2, 2, 2.0, 0.3, 0.02, 0.0, contended=False)
BUSY = Environment(2, 2, 0.3, 4.1, 0.72, 0.0, contended=True)


def test_a_batch_slower_than_a_larger_one_is_implausible_and_the_rest_stand() -> None:
    rows = [bench_row("onnxruntime", 1, 28.0), bench_row("onnxruntime", 4, 0.12), bench_row("eager", 1, 0.5)]
    checked = plausibility.checked(rows)
    b1, b4, eager = checked
    assert b1.implausible and "batch 1 took 28 ms, more than batch 4's 0.12 ms" in b1.implausible
    assert b4.implausible is None and eager.implausible is None  # other runtimes are not compared
    assert not plausibility.comparable(b1) and plausibility.comparable(b4)
    # Within the margin (noise), a smaller batch may be a little slower.
    near = [bench_row("onnxruntime", 1, 0.12 * plausibility.MARGIN * 0.99), bench_row("onnxruntime", 4, 0.12)]
    assert all(r.implausible is None for r in plausibility.checked(near))


def test_threads_slower_than_one_thread_were_parked() -> None:
    parked = dataclasses.replace(bench_row("eager", 1, 28.0), environment=QUIET, one_thread_ms=0.029)
    fine = dataclasses.replace(bench_row("eager", 1, 0.05), environment=QUIET, one_thread_ms=0.06)
    said, ok = plausibility.checked([parked, fine])[0], plausibility.checked([fine])[0]
    assert said.implausible and "with 2 intra-op threads 28 ms, with 1 thread 0.029 ms" in said.implausible
    assert ok.implausible is None


def test_the_lead_names_the_load_and_the_implausible_cells() -> None:
    rows = [
        dataclasses.replace(bench_row("eager", 1, 3.0), environment=BUSY),
        dataclasses.replace(bench_row("onnxruntime", 1, 28.0), environment=QUIET, implausible="parked"),
        dataclasses.replace(bench_row("onnxruntime", 4, 0.12), environment=QUIET),
    ]
    lead = plausibility.verdict_lead(rows)
    assert lead.startswith("CONTENDED: load 4.1 on 2 cores during bench, other processes up to 72 %")
    assert "(1 of 3 rows)" in lead and "IMPLAUSIBLE: onnxruntime@1" in lead
    assert not plausibility.comparable(rows[0]) and plausibility.comparable(rows[2])
    assert plausibility.verdict_lead(rows[2:]) == ""
