"""Moving a live Triton server (explicit model control, as `deploy serve` runs it) to a
model's newest version: a load request for the model, which Triton answers once the new
version is loaded, unloading the older one only then, so requests in flight and new ones
are answered throughout (Triton's model lifecycle; see docs/how-to/release.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

from deploy.serving.model_state import ModelState

TIMEOUT_S = 600.0  # a large model's load
INDEX_TIMEOUT_S = 10.0  # the list of loaded models: a server that holds it longer is not answering


def loaded(url: str) -> set[str]:
    """The models the server at `url` (its HTTP endpoint) has ready."""
    index = json.loads(_request(url, "/v2/repository/index", b"{}", INDEX_TIMEOUT_S))
    return {entry["name"] for entry in index if entry.get("state") == ModelState.READY}


def switch(url: str, model: str, version: int) -> str | None:
    """Loads `model` again and checks that `version` is ready; None when it is, else why not."""
    try:
        _request(url, f"/v2/repository/models/{model}/load", b"{}")
        _request(url, f"/v2/models/{model}/versions/{version}/ready", None)
    except urllib.error.HTTPError as exc:
        return f"{url}: {model} v{version}: HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}"
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: not a URL urllib takes
        return f"{url}: {model} v{version}: {exc}"
    return None


def switch_all(servers: Sequence[str], versions: Mapping[str, int]) -> list[str]:
    """Tells each server to serve each model at its version (model -> version), where the
    server has the model loaded; returns what did not switch (an unreachable server, a
    version not ready), one line each, [] when everything did."""
    problems = []
    for url in servers:
        try:
            serving = loaded(url)
        except (OSError, ValueError) as exc:  # a recovery must finish whatever one server says
            problems.append(f"{url}: unreachable ({exc})")
            continue
        problems += _together(url, {m: v for m, v in versions.items() if m in serving})
    return problems


def _together(url: str, versions: Mapping[str, int]) -> list[str]:
    """Every model's load asked at once: the pipeline's models become ready about together,
    so a client sees a mix of checkpoints across them only for the spread of their load
    times, not for the sum of them."""
    from concurrent.futures import ThreadPoolExecutor

    if not versions:
        return []
    with ThreadPoolExecutor(max_workers=len(versions)) as pool:
        found = list(pool.map(lambda item: switch(url, *item), versions.items()))
    return [p for p in found if p]


def _request(url: str, path: str, body: bytes | None, timeout_s: float = TIMEOUT_S) -> bytes:
    method = "POST" if body is not None else "GET"
    request = urllib.request.Request(f"{url.rstrip('/')}{path}", data=body, method=method)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return bytes(response.read())
