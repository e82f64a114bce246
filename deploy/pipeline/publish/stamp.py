"""The stamp each published model dir holds (`.deploy.json`): the pipeline that owns it and
its files' digests and sizes. Written by the publish and by releases; read by every check of
a repository."""

from __future__ import annotations

import json
from dataclasses import dataclass

STAMP = ".deploy.json"
SCHEMA = 1
Files = dict[str, tuple[str, int]]  # path inside the model dir -> (digest, size)


def manifest_name(pipeline: str) -> str:
    """The repository's list of a pipeline's models (publish.tree writes it)."""
    return f".deploy-{pipeline}.json"


@dataclass(frozen=True)
class Stamp:
    """What `.deploy.json` says: which pipeline owns the model dir, and its files."""

    pipeline: str
    files: Files
    schema: int = SCHEMA

    def to_json(self) -> str:
        files = {rel: [digest, size] for rel, (digest, size) in sorted(self.files.items())}
        return json.dumps({"schema": self.schema, "pipeline": self.pipeline, "files": files}, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> Stamp | None:
        """None for anything but a stamp of this schema (then the model is rewritten). A
        stamp without a schema is from before it had one: the same layout otherwise."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("schema", SCHEMA) != SCHEMA:
                return None
            files = {str(rel): (str(d), int(s)) for rel, (d, s) in data["files"].items()}
            return cls(str(data["pipeline"]), files)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
