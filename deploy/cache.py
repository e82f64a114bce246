"""Rendering for `deploy cache ls`."""

from __future__ import annotations

from rich.table import Table

from pipeline.maintenance import head_keys
from pipeline.store import Store


def ls_table(store: Store) -> Table:
    roots = head_keys(store)
    table = Table(title=f"cache {store.root}", title_justify="left")
    for column in ("stage", "key", "created", "size", "used by"):
        table.add_column(column)
    for path, entry in store.entries():
        if entry is None:
            table.add_row("?", path.stem[:12], "", "", "[red]unreadable[/]")
            continue
        size = sum(o.size for o in entry.outputs.values())
        used = ", ".join(roots.get(entry.key, [])) or "[dim]-[/]"
        table.add_row(entry.stage, entry.key[:12], entry.created, f"{size / 1e6:.1f} MB", used)
    return table
