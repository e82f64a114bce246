"""The bench stage's results as typed records: `Measured`, the summary of one timed
sequence (what `deploy bench` prints), and `BenchRow`, one measured cell of the stage (a
runtime at a batch size and concurrency) with what its runtime adds: the GPU phase split,
Triton's server-side share, the speed-up over eager PyTorch.

`BenchResults` is bench.json, the bench stage's versioned record, read back by the select
stage. Stdlib (and the engine's record check) only, like the harness that fills them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from deploy.pipeline.graph.records import read_record
from deploy.runtimes.contention import Environment

# bench.json's layout; bumped with the bench stage's version (its key), see pipeline/graph/records.py.
# 2: a served row is runtime `triton` with its `model` (1 spelled it `triton:MODEL`).
# 3: each row's environment (contention) and plausibility.
SCHEMA = 3


@dataclass(frozen=True)
class WindowSummary:
    n: int  # calls completed in the window
    qps: float
    median_ms: float


@dataclass(frozen=True, kw_only=True)
class Measured:
    batch: int
    iterations: int  # samples the statistics rest on (the kept windows)
    warmup_calls: int
    min_ms: float
    max_ms: float
    mean_ms: float
    median_ms: float
    percentiles_ms: dict[str, float]  # "p99" -> ms
    percentiles_supported: dict[str, bool]  # enough samples for that percentile?
    qps: float
    items_per_s: float
    wall_s: float
    cv: float  # coefficient of variation of the latencies
    stable: bool
    windows_used: int
    measured_s: float
    windows: list[WindowSummary]
    environment: Environment | None = None  # the machine while it was timed (runtimes/contention.py)

    @property
    def contended(self) -> bool:
        return self.environment is not None and self.environment.contended

    def supported(self, key: str) -> bool:
        return self.percentiles_supported.get(key, False)

    def tail(self) -> str:
        """The highest configured percentile's key, e.g. 'p99'."""
        return max(self.percentiles_ms, key=lambda k: float(k[1:]))


@dataclass(frozen=True)
class ServerShare:
    """Triton's statistics per request over the kept windows, microseconds."""

    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float
    requests: int
    executions: int
    inferences: int
    avg_server_batch: float  # inferences per execution: what the dynamic batcher formed
    client_overhead_us: float  # the client's mean latency less the server's phases


@dataclass(frozen=True, kw_only=True)
class BenchRow(Measured):
    runtime: str  # a Runtime: "onnxruntime", "eager", … or "triton" (a served model, end to end)
    device: str  # "cpu", "cuda", or "server" for Triton
    concurrency: int = 1  # closed-loop streams; 0: open loop at `request_rate`
    request_rate: float | None = None  # requests/s offered (perf_analyzer's --request-rate-range)
    late_share: float | None = None  # of those sends, the share that left > 1 ms behind schedule
    speedup_vs_eager: float | None = None  # single-stream rows at a batch eager also ran
    gpu: dict[str, dict[str, float]] | None = None  # phase -> statistic -> ms (CUDA events)
    server: ServerShare | None = None
    # OpenVINO's performance hint when it is not the latency one: "throughput" (its own
    # streams, `concurrency` requests in flight).
    hint: str | None = None
    model: str | None = None  # runtime triton: the served model timed
    # Why its numbers cannot be right (a batch of 1 slower than a larger one, threads
    # parked): shown, never compared (runtimes/plausibility.py). None: plausible.
    implausible: str | None = None
    one_thread_ms: float | None = None  # the same call's median with one intra-op thread (the check's)
    served_threads: str | None = None  # runtime triton: what its instance settings imply (serving.repository)

    @property
    def flagged(self) -> str | None:
        """Why no verdict may rest on this row: contended, implausible; None when one may."""
        if self.implausible:
            return f"implausible: {self.implausible}"
        if self.contended and self.environment is not None:
            return self.environment.text()
        return None

    @property
    def subject(self) -> str:
        """What was timed, as tables and the regression gate name it: the runtime, or
        `triton:MODEL` for a served model."""
        return f"{self.runtime}:{self.model}" if self.model else self.runtime

    @property
    def label(self) -> str:
        return f"{self.subject} ({self.hint} hint)" if self.hint else self.subject

    @classmethod
    def of(
        cls, measured: Measured, runtime: str, device: str, concurrency: int = 1, model: str | None = None
    ) -> BenchRow:
        return cls(**vars(measured), runtime=runtime, device=device, concurrency=concurrency, model=model)

    @property
    def load(self) -> str:
        """The load the row was measured under: `1`, `c4` (streams) or `r50` (requests/s)."""
        if self.request_rate is not None:
            return f"r{self.request_rate:g}"
        return str(self.concurrency) if self.concurrency == 1 else f"c{self.concurrency}"

    @property
    def single_stream(self) -> bool:
        """One request at a time: the row latency compares (not a concurrency or a rate)."""
        return self.concurrency == 1 and self.request_rate is None

    @property
    def cell_key(self) -> str:
        """How the regression gate names it: runtime@batch, runtime@batch/cN or runtime@batch/rR."""
        key = f"{self.subject}@{self.batch}"
        return key if self.single_stream else f"{key}/{self.load}"

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class BenchResults:
    """bench.json: the rows measured, the runtimes skipped (and why), where and how."""

    rows: list[BenchRow]
    skipped: dict[str, str] = field(default_factory=dict)  # runtime -> why it was not timed
    host: Mapping[str, object] = field(default_factory=dict)  # runtimes.devices.host_identity()
    settings: Mapping[str, object] = field(default_factory=dict)  # the stage's params, as run

    def to_json(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "host": dict(self.host),
            "settings": dict(self.settings),
            "results": [r.to_json() for r in self.rows],
            "skipped": self.skipped,
        }

    @classmethod
    def read(cls, path: Path) -> BenchResults:
        found = read_record(path, BenchFile, SCHEMA, "a bench results record")
        return cls(found.results, found.skipped, found.host, found.settings)


@dataclass(frozen=True)
class BenchFile:
    """bench.json's fields as written (its rows under `results`), for the typed reader."""

    results: list[BenchRow]
    skipped: dict[str, str]
    host: dict[str, object]
    settings: dict[str, object]
