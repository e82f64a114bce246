"""Fault injection for the tests of multi-step writes: with `DEPLOY_FAULT` set, the
process kills itself with SIGKILL at the point it names, the way a power cut or a `kill
-9` would stop it, so a test can prove the next command completes or reverts whatever
was under way.

- `DEPLOY_FAULT=<name>`: at the named point (`journal`, `placed:<model>`, ...);
- `DEPLOY_FAULT=write#N`: at the N-th atomic write of this process, its temp file
  written and not yet renamed into place (pipeline/hashing.atomic_write_text);
- `DEPLOY_FAULT=rename#N`: just before the N-th rename of a release or rollback;
- `DEPLOY_FAULT=repair#N`: at the N-th file put back (store/leftovers.repairing), its copy
  written and not yet renamed onto the changed one;
- `DEPLOY_FAULT=SIGTERM@<name>` (any signal's name): that signal, not SIGKILL, at the point.

Unset (always, outside tests) every point is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

FAULT_ENV = "DEPLOY_FAULT"
_seen: Counter[str] = Counter()


def point(name: str, kind: str = "") -> None:
    """Dies here when DEPLOY_FAULT names this point, or counts `kind` up to its turn."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    sent, _, at = wanted.partition("@")  # SIGTERM@<name>: a catchable signal there instead
    if at == name and sent in signal.Signals.__members__:
        os.kill(os.getpid(), signal.Signals[sent])
    if kind and wanted.startswith(f"{kind}#"):
        _seen[kind] += 1
        if str(_seen[kind]) == wanted.partition("#")[2]:
            os.kill(os.getpid(), signal.SIGKILL)


def rename(source: os.PathLike[str] | str, target: os.PathLike[str] | str) -> None:
    """os.rename with a fault point before it."""
    point(f"rename:{os.fspath(target)}", "rename")
    os.rename(source, target)
