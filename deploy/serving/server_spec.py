"""Which tritonserver to use, and its identity for the cache key.

Light on purpose (stdlib + pydantic): the smoke stage's module imports it at discovery
time, on every `deploy` invocation, and the key is computed on every run.
"""

from __future__ import annotations

import importlib.util
import shutil
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ServerKind(str, Enum):
    AUTO = "auto"  # tritonserver on PATH, else the nvidia-pytriton wheel's
    BINARY = "binary"
    DOCKER = "docker"
    URL = "url"  # a server someone else runs: never started or stopped by deploy

    @property
    def backends_known(self) -> bool:
        """Whether the backends can be listed before a load is tried (a local binary)."""
        return self in (ServerKind.AUTO, ServerKind.BINARY)


class ServerSpec(BaseModel):
    """Which server: auto (tritonserver on PATH, else the nvidia-pytriton wheel's),
    a binary, a docker image, or the URL of a running server (never stopped by us)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: ServerKind = Field(
        ServerKind.AUTO,
        description="auto: tritonserver on PATH, else the nvidia-pytriton wheel's; binary: `path`; docker: `image`; "
        "url: a running server (`url`, `grpc_url`), never stopped by deploy.",
    )
    path: Path | None = Field(None, description="kind binary: the tritonserver executable.")
    image: str | None = Field(
        None, description="kind docker: the Triton image, e.g. `nvcr.io/nvidia/tritonserver:<tag>-py3`."
    )
    gpus: bool = Field(False, description="kind docker: run the container with --gpus all.")
    url: str | None = Field(None, description="kind url: HTTP endpoint of the running server, host:port.")
    grpc_url: str | None = Field(None, description="kind url: its gRPC endpoint, host:port.")
    host: str = Field(
        "127.0.0.1", description="Where a server deploy starts listens; loopback unless changed."
    )
    http_port: int | None = Field(
        None, ge=1, le=65535, description="HTTP port of a server deploy starts; null: a free port."
    )
    grpc_port: int | None = Field(
        None, ge=1, le=65535, description="gRPC port of a server deploy starts; null: a free port."
    )
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="Metrics port of a server deploy starts; null: a free port."
    )
    cache_mib: int = Field(
        32,
        ge=0,
        description="Local response cache of a server deploy starts (--cache-config local,size=...), used by "
        "models with response_cache; 0: none.",
    )
    log_verbose: int = Field(
        0,
        ge=0,
        le=3,
        description="--log-verbose of a server deploy starts (smoke raises it to 1 to see warm-ups).",
    )
    startup_timeout_s: float = Field(120, gt=0, description="Seconds to wait for the server to become ready.")
    stop_grace_s: float | None = Field(
        None,
        ge=0,
        description="Seconds between asking the server to stop and killing it. Unset: 10 for `deploy serve`; "
        "a stage's server (smoke, bench, triton_search) has nothing in flight when it stops and is killed at once.",
    )

    @model_validator(mode="after")
    def _kind_fields(self) -> ServerSpec:
        needs = {
            ServerKind.BINARY: ("path",),
            ServerKind.DOCKER: ("image",),
            ServerKind.URL: ("url", "grpc_url"),
        }.get(self.kind, ())
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ValueError(f"server kind '{self.kind.value}' needs {', '.join(missing)}")
        return self


# -- identity (for the cache key: cheap, no server started) ---------------------------------
def identity(spec: ServerSpec) -> dict[str, Any]:
    if spec.kind is ServerKind.DOCKER:
        return {"triton_server": f"docker:{spec.image}"}
    if spec.kind is ServerKind.URL:
        return {"triton_server": f"url:{spec.url}"}
    binary = find_binary(spec)
    if binary is None or not binary.is_file():  # the stage says so, with the fix, when it runs
        return {"triton_server": f"not found: {binary}"}
    st = binary.stat()
    return {"triton_server": f"{binary}:{st.st_size}:{st.st_mtime_ns}"}


def find_binary(spec: ServerSpec) -> Path | None:
    if spec.kind is ServerKind.BINARY:
        return spec.path
    on_path = shutil.which("tritonserver")
    if on_path:
        return Path(on_path)
    root = pytriton_root()
    return root / "tritonserver" / "bin" / "tritonserver" if root else None


def pytriton_root() -> Path | None:
    found = importlib.util.find_spec("pytriton")
    return Path(found.origin).parent if found and found.origin else None
