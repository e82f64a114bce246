"""Values of the data a trace froze into its graph. Tracing (torch.jit.trace, the legacy
ONNX exporter) records one run: a Python `if` on a tensor, an `int()` of a computed size
or a loop over a tensor takes the path the example inputs took, for every input after, and
torch only says so in a TracerWarning that names the source line. In the user's own code
that is an error naming the line, unless the config accepts it by name; in a library's
(torchvision's detection transforms, transformers' checks) it is recorded and left to the
parity checks at sampled shapes and value edges, which see what it changed.

Imported only from inside stage run functions: it imports torch.
"""

from __future__ import annotations

import sys
import sysconfig
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from deploy.pipeline.errors import StageFailed

# Where installed code lives: warnings from there are a library's, not the user's.
_LIBRARY_ROOTS = tuple(
    str(Path(p).resolve()) for p in {*sysconfig.get_paths().values(), sys.prefix, sys.base_prefix} if p
)
_INSTALLED = ("site-packages", "dist-packages")


@dataclass(frozen=True)
class FrozenValue:
    """One TracerWarning: where, and what torch said."""

    filename: str
    line: int
    message: str

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.line}"

    @property
    def in_library(self) -> bool:
        path = str(Path(self.filename).resolve())
        return any(part in path for part in _INSTALLED) or path.startswith(_LIBRARY_ROOTS)

    def text(self) -> str:
        return f"{self.where}: {_source(self.filename, self.line)} ({self.message.split('.')[0]})"

    def accepted(self, names: Sequence[str]) -> bool:
        """`file.py:12` accepts that line, `file.py` every line of that file (a suffix of the path)."""
        return any(self.where.endswith(n) or self.filename.endswith(n) for n in names)


@contextmanager
def recording() -> Iterator[list[FrozenValue]]:
    """Collects the TracerWarnings raised inside (other warnings pass through)."""
    found: list[FrozenValue] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        yield found
    for item in caught:
        if issubclass(item.category, torch.jit.TracerWarning):
            found.append(FrozenValue(item.filename, item.lineno, str(item.message)))
        else:
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)


def unique(found: Sequence[FrozenValue]) -> list[FrozenValue]:
    return list(dict.fromkeys(found))


def refuse(found: Sequence[FrozenValue], accepted: Sequence[str], what: str, field: str) -> None:
    """StageFailed naming each line of the user's code whose value the trace froze."""
    own = [f for f in unique(found) if not f.in_library and not f.accepted(accepted)]
    if not own:
        return
    lines = "; ".join(f.text() for f in own[:6])
    raise StageFailed(
        f"{what} froze a value of the data into the graph at {lines}: the graph takes the path the example inputs "
        "took for every input. Write it with tensor ops (torch.where, torch.cond), or, where the value is truly "
        f"fixed, accept it by name: {field}: [{', '.join(repr(Path(f.filename).name + ':' + str(f.line)) for f in own[:3])}]"
    )


def _source(filename: str, line: int) -> str:
    try:
        text = Path(filename).read_text(errors="replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return "?"
    return f"`{text[:100]}`"
