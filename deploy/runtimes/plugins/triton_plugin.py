"""Triton: a served model timed end to end through a server (bench's served rows name the
model); not a candidate of its own: select maps served rows back to the runtimes above."""

from __future__ import annotations

from deploy.runtimes.plugin import Family, RuntimePlugin

PLUGIN = RuntimePlugin("triton", "repository", Family.TRITON, None, in_process=False)
