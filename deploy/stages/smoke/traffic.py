"""Production's traffic on a served model: several clients at once, each sending its own
inputs (golden's client requests: distinct rows, batch sizes 1, 2, 3 where the model takes
a batch; for a service, a different image or sentence per request), over each protocol;
every answer compared with the reference for exactly that request. A server that merges
requests (dynamic batching) of a model whose answer for one sample depends on the others
answers some clients with other clients' data: that is a mismatch naming the client, its
request and the output. The server's statistics say whether requests were merged
(executions fewer than requests); where they never were, the check says that batching was
not exercised rather than claiming it was."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploy.gates.detection_parity import Arrays, DetectionLayout, aligned
from deploy.gates.parity import Compared, metrics
from deploy.gates.parity_table import OutputParity
from deploy.gates.references import Case
from deploy.gates.tolerance import Tolerance
from deploy.serving.requests import SETTLE_S, Client, settled, statistics
from deploy.serving.smoke_report import Traffic

if TYPE_CHECKING:
    from deploy.serving.tritonserver import Server

# Bursts sent until the server merges requests of different clients (a fast model on an
# idle server can answer each before the next arrives).
ROUNDS = 3
# Mismatches listed in full; the rest are counted.
LISTED = 5


@dataclass(frozen=True)
class Send:
    """One request of one client: which of the distinct requests it sends, over what."""

    client: int
    protocol: str
    request: int


# ask(conn, protocol, request index) -> the answer's outputs by name
Ask = Callable[[Client, str, int], Arrays]
# judge(request index, answer) -> what is wrong with it ([] when it is right)
Judge = Callable[[int, Arrays], list[str]]


@dataclass(frozen=True)
class TrafficPlan:
    """Who sends what: per client its sends, and each distinct request's batch size."""

    sends: list[list[Send]]
    batches: list[int]


def plan(batches: list[int], clients: int, requests: int, protocols: Sequence[str]) -> TrafficPlan:
    """Client c starts at request c and steps on, so clients sending at the same moment send
    different requests; protocols alternate between clients."""
    per_client = max(1, requests // clients)
    sends = [
        [Send(c, protocols[c % len(protocols)], (c + k) % len(batches)) for k in range(per_client)]
        for c in range(clients)
    ]
    return TrafficPlan(sends, batches)


@dataclass(frozen=True)
class TrafficServer:
    """How the clients reach the model: `connect(protocol)` opens one client's connection;
    `stats` is a gRPC connection for the statistics of `counted` (the model that executes)."""

    connect: Callable[[str], Client]
    stats: Client
    counted: str


@contextmanager
def reach(server: Server, counted: str, timeout_s: float) -> Iterator[TrafficServer]:
    """The clients' way to a live server (serving.tritonserver.Server), with a statistics
    connection closed afterwards."""
    from deploy.stages.smoke import checks

    stats = checks.client(server, "grpc", timeout_s)
    try:
        yield TrafficServer(lambda p: checks.client(server, p, timeout_s), stats, counted)
    finally:
        stats.close()


def run(server: TrafficServer, ask: Ask, judge: Judge, load: TrafficPlan, merging: bool) -> Traffic:
    """Bursts of every client at once until requests were merged (where dynamic batching is
    on: up to ROUNDS) or an answer was wrong."""
    total = sum(map(len, load.sends))
    found = Traffic(len(load.sends), total, len(load.batches), load.batches, merging_configured=merging)
    for round_ in range(1, (ROUNDS if merging else 1) + 1):
        before = statistics(server.stats, server.counted)
        answers = _burst(server.connect, ask, load.sends)
        after = settled(
            lambda: statistics(server.stats, server.counted),
            lambda s: s.requests,
            before.requests + total,
            SETTLE_S,
        )
        found.rounds, found.executions = round_, after.executions - before.executions
        # Requests the response cache answered never reach an execution: not merged ones.
        executed = after.requests - before.requests - (after.cache_hits - before.cache_hits)
        found.merged = found.executions < executed
        _judge(found, answers, judge, load.batches)
        if found.merged or found.mismatch_count:
            break
    if found.merged and found.mismatch_count:
        wrong = {s.request for s, got, _ in answers if got is not None and judge(s.request, got)}
        found.alone = _alone(server, ask, judge, wrong, load)
    return found


def _alone(server: TrafficServer, ask: Ask, judge: Judge, wrong: set[int], load: TrafficPlan) -> str:
    """Each request answered wrong under merging, sent again alone: merging is the cause only
    where it is then right (a wrong export at a batch golden never held was blamed on it)."""
    protocol = load.sends[0][0].protocol
    conn = server.connect(protocol)
    try:
        still = sorted({load.batches[r] for r in wrong if judge(r, ask(conn, protocol, r))})
    finally:
        conn.close()
    if still:
        return (
            f"sent alone, the requests of batch {'/'.join(map(str, still))} are wrong too: not the merging; the "
            "served model is wrong at that batch, a size golden's shapes did not hold (stages.golden.sampled_shapes "
            "draws more between min and max)"
        )
    return (
        "each sent alone is right: the merging is the cause (an answer that depends on the rest of its batch)"
    )


Answer = tuple[Send, Arrays | None, str]


def _burst(connect: Callable[[str], Client], ask: Ask, sends: list[list[Send]]) -> list[Answer]:
    """Every client in its own thread with its own connection, released together."""
    start = threading.Barrier(len(sends))
    answers: list[Answer] = []
    lock = threading.Lock()
    conns = [connect(mine[0].protocol) for mine in sends]

    def client(mine: list[Send], conn: Client) -> None:
        start.wait()
        for send in mine:
            try:
                got: Arrays | None = ask(conn, send.protocol, send.request)
                error = ""
            except Exception as exc:  # a refused request is an answer too: it is judged
                got, error = None, f"{type(exc).__name__}: {exc}"
            with lock:
                answers.append((send, got, error))

    threads = [threading.Thread(target=client, args=pair, daemon=True) for pair in zip(sends, conns)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for conn in conns:
        conn.close()
    return answers


def _judge(found: Traffic, answers: list[Answer], judge: Judge, batches: list[int]) -> None:
    for send, got, error in answers:
        who = (
            f"client {send.client} ({send.protocol}), request {send.request} (batch {batches[send.request]})"
        )
        problems = [f"failed: {error}"] if got is None else judge(send.request, got)
        for problem in problems:
            found.mismatch_count += 1
            if len(found.mismatches) < LISTED:
                found.mismatches.append(f"{who}: {problem}")


# -- tensors in, tensors out: golden's client requests -------------------------------------------
def tensor_judge(cases: list[Case], tol: Tolerance, layout: DetectionLayout | None = None) -> Judge:
    """Each output against the request's own reference, with the smoke tolerance (padded
    detections row for matching row)."""

    def judge(request: int, answer: Arrays) -> list[str]:
        got = aligned(cases[request].outputs, answer, layout)
        found = []
        for name, ref in cases[request].outputs.items():
            compared = metrics(got[name], ref, tol) if name in got else None
            if compared is None or not (compared.passed or _identical(compared)):
                found.append(f"output '{name}' {_difference(compared)} from its own reference")
        return found

    return judge


def batch_sizes(cases: list[Case]) -> list[int]:
    return [len(next(iter(c.inputs.values()))) for c in cases]


def _identical(compared: OutputParity | None) -> bool:
    """Equal to the last bit: passes even where the cosine is undefined (an all-zero answer,
    e.g. a batch-centred output for one sample, equal to an all-zero reference)."""
    return isinstance(compared, Compared) and compared.max_abs == 0


def _difference(compared: OutputParity | None) -> str:
    if compared is None:
        return "missing"
    if not isinstance(compared, Compared):
        return f"differs: {compared.error}"
    cosine = "undefined" if compared.cosine is None else f"{compared.cosine:.6f}"
    return f"differs by max |Δ| {compared.max_abs:.3g} (cosine {cosine})"
