"""The open-files limit a run needs. Its stages' children, their fork server and a
tritonserver with its python backend's stubs hold hundreds of descriptors: under
`ulimit -n 16` the fork server failed an assertion and the run reported a Ctrl-C nobody
pressed; under 64 smoke waited out its startup timeout ("Too many open files" in the
server's log). The soft limit is raised to what the hard limit allows, as servers do;
below NEEDED even then, the run is refused before anything starts."""

from __future__ import annotations

import resource

from deploy.pipeline.errors import EnvError

NEEDED = 256  # the tiny config's run needed more than 64 and at most 128 here: with margin
WANTED = 4096  # the soft limit raised up to this, where the hard limit allows


def enough_open_files() -> None:
    """Raises the soft limit toward WANTED; EnvError where the hard one keeps it under NEEDED."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = WANTED if hard == resource.RLIM_INFINITY else min(hard, WANTED)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        soft = ceiling
    if soft != resource.RLIM_INFINITY and soft < NEEDED:
        raise EnvError(
            f"the open-files limit (ulimit -n) is {soft}, and its hard limit too: a run's stages and "
            f"tritonserver need about {NEEDED}; raise it (ulimit -n 1024), then rerun"
        )
