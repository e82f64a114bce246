"""Laying out a tree that holds each distinct file once: a second file with the same
digest becomes a hard link to the first where the file system allows, a copy where it
doesn't (another device, no link support, the link limit reached)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

ONNX_SUFFIX = ".onnx"


def linkable(rel: str, tree: Iterable[str]) -> bool:
    """ONNX and ONNX Runtime refuse an external-data file with more than one link (their
    guard against hard-link attacks), so a file beside an ONNX model that is not itself a
    model is never linked. `tree`: every relative path in the tree."""
    path = PurePosixPath(rel)
    if path.suffix == ONNX_SUFFIX:
        return True
    return not any(
        PurePosixPath(other).parent == path.parent and PurePosixPath(other).suffix == ONNX_SUFFIX
        for other in tree
    )


class Once:
    """Places files by digest; `place` returns True when it linked rather than wrote."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}

    def place(
        self, digest: str, target: os.PathLike[str] | str, write: Callable[[], None], link: bool
    ) -> bool:
        first = self._first.get(digest) if link else None
        if first is not None:
            try:
                os.link(first, target)
                return True
            except OSError:  # EXDEV, EPERM, EMLINK, ENOTSUP: a copy is the fallback
                pass
        write()
        if link:
            self._first.setdefault(digest, os.fspath(target))
        return False
