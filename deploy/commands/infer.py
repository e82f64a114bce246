"""`deploy infer`: what a user runs first against a served repository: images or
sentences to a published service (an ensemble triton_config wrote), the labels or the
embedding's first values back, with the latency of each request."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Protocol
from deploy.pipeline.errors import ConfigError, EnvError, UsageError
from deploy.serving.requests import Client
from deploy.serving.service import IMAGE_INPUT, TEXT_INPUT
from deploy.serving.service_client import GENERATE_REACHED, Answer, service_input


@dataclass(frozen=True)
class InferRequest:
    url: str
    protocol: Protocol
    model: str | None
    images: list[Path]
    texts: list[str]
    timeout_s: float


def infer(request: InferRequest, say: Callable[[str], None]) -> None:
    from deploy.serving.requests import connect

    items = _items(request)
    kind = IMAGE_INPUT if request.images else TEXT_INPUT
    conn = connect(request.url, request.protocol, request.timeout_s)
    model = request.model or _only_service(conn, request, kind)
    _expect(conn, request, model, kind)
    for label, data in items:
        say(_describe(label, _ask(conn, request, model, kind, label, data)))


def _items(request: InferRequest) -> list[tuple[str, bytes]]:
    if bool(request.images) == bool(request.texts):
        raise UsageError("deploy infer", [Issue("--image / --text", "give images or texts (one of them)")])
    missing = [p for p in request.images if not p.is_file()]
    if missing:
        raise ConfigError("deploy infer", [Issue("--image", f"no such file: {p}") for p in missing])
    if request.images:
        return [(_shown(p), p.read_bytes()) for p in request.images]
    # The bytes as given: an argument that is not UTF-8 arrives surrogate-escaped, and the
    # service says what is wrong with it (it decodes UTF-8, strictly).
    return [(f"text {i + 1}", t.encode("utf-8", "surrogateescape")) for i, t in enumerate(request.texts)]


def _shown(path: Path) -> str:
    """A file as the user named it; the shipped sample by its name (not a site-packages path)."""
    from deploy.samples import PHOTO

    return PHOTO.name if path == PHOTO else str(path)


def _reach(call: Callable[[], Any], request: InferRequest) -> Any:
    from tritonclient.utils import InferenceServerException

    try:
        return call()
    except InferenceServerException as exc:
        raise EnvError(f"{request.url} ({request.protocol}): {exc.message()}") from exc
    except OSError as exc:  # refused, unreachable, timed out
        raise EnvError(
            f"no Triton server answers at {request.url} ({request.protocol}): {exc}; start one with "
            "`deploy serve CONFIG` or pass --url"
        ) from exc


def _only_service(conn: Client, request: InferRequest, kind: str) -> str:
    from deploy.serving.model_state import LoadState
    from deploy.serving.service_record import ENSEMBLE_SUFFIX

    index = _reach(lambda: conn.get_model_repository_index(**_json(request)), request)
    ready = [
        m["name"]
        for m in (index.get("models", []) if isinstance(index, dict) else index)
        if LoadState.from_index(m).ready
    ]
    services = []
    for name in (n for n in ready if n.endswith(ENSEMBLE_SUFFIX)):
        try:
            if service_input(conn, request.protocol, name) == kind:
                services.append(name)
        except ValueError:
            continue
    if not services:  # tensor endpoints only: nothing takes bytes or sentences
        raise _no_service(kind, ready, request.url, _generating(conn, request.protocol, ready))
    if len(services) != 1:
        raise ConfigError(
            "deploy infer",
            [
                Issue(
                    "--model",
                    f"name the service: {kind} services ready at {request.url}: {', '.join(services)}",
                )
            ],
        )
    return services[0]


def _generating(conn: Client, protocol: Protocol, ready: Iterable[str]) -> list[str]:
    """The ready models that are a decoder's generate models (they take text, not as services)."""
    found = []
    for name in ready:
        try:
            service_input(conn, protocol, name)
        except ValueError as exc:
            found += [name] if GENERATE_REACHED in str(exc) else []
    return found


def _no_service(kind: str, ready: Iterable[str], url: str, generating: list[str]) -> ConfigError:
    """Only tensor endpoints: what the model's config lacks to take `kind`."""
    if generating:  # a decoder: its text goes to the generate models, which this command does not call
        said = f"no {kind} service is ready at {url}; {', '.join(generating)}: {GENERATE_REACHED}"
        return ConfigError("deploy infer", [Issue("--model", said)])
    step = "preprocess: {kind: image, …}" if kind == IMAGE_INPUT else "preprocess: {kind: text, tokenizer: …}"
    said = (
        f"no {kind} service is ready at {url} (models: {', '.join(sorted(ready)) or 'none'}): a model takes "
        f"{kind} only with pre-processing: set triton_config.{step} (and postprocess) in its config and run "
        "it again (docs/how-to/services.md)"
    )
    return ConfigError("deploy infer", [Issue("--model", said)])


def _json(request: InferRequest) -> dict[str, bool]:
    return {"as_json": True} if request.protocol == Protocol.GRPC else {}


def _expect(conn: Client, request: InferRequest, model: str, kind: str) -> None:

    if not _reach(lambda: conn.is_model_ready(model), request):
        raise ConfigError("deploy infer", [Issue("--model", f"'{model}' is not ready at {request.url}")])
    try:
        takes = _reach(lambda: service_input(conn, request.protocol, model), request)
    except ValueError as exc:
        raise ConfigError("deploy infer", [Issue("--model", str(exc))]) from exc
    if takes != kind:
        flag = "--image" if takes == IMAGE_INPUT else "--text"
        raise ConfigError("deploy infer", [Issue("--model", f"'{model}' takes {takes}: use {flag}")])


def _ask(conn: Client, request: InferRequest, model: str, kind: str, label: str, data: bytes) -> Answer:
    from tritonclient.utils import InferenceServerException

    from deploy.serving.service_client import ask

    try:
        return ask(conn, request.protocol, model, kind, [data])
    except InferenceServerException as exc:
        flag = "--image" if kind == IMAGE_INPUT else "--text"
        raise ConfigError(
            "deploy infer", [Issue(flag, f"{label}: the service refused it: {exc.message()}")]
        ) from exc


def _describe(label: str, answer: Answer) -> str:
    out = answer.outputs
    if "labels" in out:
        picks = [f"{_text(name)} {score:.3f}" for name, score in zip(out["labels"][0], out["scores"][0])]
        body = "\n  ".join(f"{i + 1}. {p}" for i, p in enumerate(picks))
        return f"{label}  ({answer.latency_ms:.1f} ms)\n  {body}"
    name, values = next(iter(out.items()))
    flat = values[0].reshape(-1)
    head = ", ".join(f"{v:.4f}" for v in flat[:6])
    return f"{label}  ({answer.latency_ms:.1f} ms)\n  {name}: [{head}, ...] ({flat.size} values, norm {float((flat**2).sum()) ** 0.5:.3f})"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
