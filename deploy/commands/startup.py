"""What the command line sets before anything imports pydantic. Imported first by
deploy.cli, never by the library (`import deploy` changes nothing in its caller's process)."""

from __future__ import annotations

import os

# The command line has no use for pydantic's plugins, and finding them reads the entry points
# of every installed distribution: about a third of `deploy validate`'s time here. A user who
# wants a plugin sets PYDANTIC_DISABLE_PLUGINS to an empty value.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
