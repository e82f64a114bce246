"""`deploy cache …`: list, collect, verify the local artifact store, and move entries
between it and a shared remote cache (push / pull / ls --remote)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from deploy.commands.cli_common import CacheOpt
from deploy.console.terminal import make_console
from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from deploy.pipeline.store.objects import Store
    from deploy.pipeline.store.remote import RemoteCache

cache_app = typer.Typer(
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Inspect and maintain the artifact cache, and share it through a remote.",
)

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="Use this config's cache_dir (and cache.remote).")
]
RemoteOpt = Annotated[
    str | None,
    typer.Option(
        "--remote",
        help="Remote cache URL (s3://bucket/prefix, gs://…, file://…); default: $DEPLOY_CACHE_REMOTE, then the config's.",
    ),
]


def _console() -> Console:
    from deploy.pipeline.process.logs import console_stream

    return make_console(file=console_stream())


def _store(config: Path | None, cache_dir: Path | None, writes: bool = False, made: bool = True) -> Store:
    """The cache asked for; one that is not there is said (a mistyped --cache-dir listed
    nothing and verified "0 damaged entries"), and one a command changes must be writable
    (gc on a read-only one was a traceback)."""
    from deploy.pipeline.graph.project import CACHE_ENV, load_project
    from deploy.pipeline.store.objects import Store
    from deploy.pipeline.store.writable import require_writable

    if cache_dir is not None:
        root = cache_dir.expanduser()
    elif config is not None:
        root = load_project(config).cache_dir
    else:
        root = Path(os.environ.get(CACHE_ENV, ".deploy-cache")).expanduser()
    if made and not root.is_dir():
        said = f"no cache at {root.absolute()}: no run has used it (a mistyped path?); give --cache-dir or --config"
        raise ConfigError("--cache-dir", [Issue("--cache-dir", said)])
    if writes:
        require_writable({"cache_dir": root})
    return Store(root)


def _remote(url: str | None, config: Path | None, console: Console) -> RemoteCache:
    """--remote, else $DEPLOY_CACHE_REMOTE, else the config's cache.remote."""
    from deploy.pipeline.graph.project import REMOTE_ENV, load_project
    from deploy.pipeline.store.remote import RemoteCache, RemoteSpec

    endpoint = None
    if config is not None:
        settings = load_project(config).config.cache
        url, endpoint = url or settings.remote, settings.endpoint_url
    url = url or os.environ.get(REMOTE_ENV)
    if not url:
        raise ConfigError(
            "--remote", [Issue("", f"no remote cache: give --remote URL, ${REMOTE_ENV} or --config")]
        )
    return RemoteCache(RemoteSpec(url, endpoint), lambda m: console.print(f"[yellow]warning[/]: {m}"))


def _reachable(remote: RemoteCache) -> None:
    if not remote.usable:
        raise typer.Exit(ExitCode.ENVIRONMENT)


@cache_app.command("ls")
def cache_ls(config: ConfigOpt = None, cache_dir: CacheOpt = None, remote: RemoteOpt = None) -> None:
    """List cache entries: stage, key, size, age, and which pipeline's last run uses it
    (with --remote: the remote's entries)."""
    console = _console()
    if remote is None:
        console.print(ls_table(_store(config, cache_dir)))
        return
    found = _remote(remote, config, console)
    table = Table(title=f"remote cache {found.spec.url}", title_justify="left")
    for column in ("stage", "key", "created", "size"):
        table.add_column(column)
    for key in found.keys():
        entry = found.entry(key)
        if entry is not None:
            size = sum(o.size for o in entry.outputs.values())
            table.add_row(entry.stage, key[:12], entry.created, f"{size / 1e6:.1f} MB")
    _reachable(found)
    console.print(table)


@cache_app.command("push")
def cache_push(config: ConfigOpt = None, cache_dir: CacheOpt = None, remote: RemoteOpt = None) -> None:
    """Upload every local entry the remote lacks (objects first, each entry last)."""
    console = _console()
    found = _remote(remote, config, console)  # no remote named: said before the cache is looked at
    store = _store(config, cache_dir)
    have = set(found.keys())
    entries = [e for _, e in store.entries() if e is not None and e.key not in have]
    started = time.perf_counter()
    sent = found.push(entries, store)
    _reachable(found)
    console.print(
        f"pushed {sent.entries} entries, {sent.objects} objects ({sent.bytes / 1e6:.1f} MB) "
        f"in {time.perf_counter() - started:.1f} s"
    )


@cache_app.command("pull")
def cache_pull(config: ConfigOpt = None, cache_dir: CacheOpt = None, remote: RemoteOpt = None) -> None:
    """Download every remote entry the local store lacks, each object checked against its digest."""
    console = _console()
    store, found = _store(config, cache_dir, writes=True, made=False), _remote(remote, config, console)
    started, pulled = time.perf_counter(), 0
    for key in found.keys():
        if store.lookup(key)[0] is None and found.pull(key, store) is not None:
            pulled += 1
    _reachable(found)
    console.print(f"pulled {pulled} entries in {time.perf_counter() - started:.1f} s")


@cache_app.command("gc")
def cache_gc(
    config: ConfigOpt = None,
    cache_dir: CacheOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
) -> None:
    """Remove entries no pipeline's last run uses, and unreferenced objects."""
    from deploy.pipeline.store.maintenance import collect

    report = collect(_store(config, cache_dir, writes=not dry_run), dry_run)
    verb = "would remove" if dry_run else "removed"
    _console().print(
        f"{verb} {len(report.entries)} entries, {len(report.objects)} objects "
        f"({report.freed_bytes / 1e6:.1f} MB)"
    )


@cache_app.command("verify")
def cache_verify(config: ConfigOpt = None, cache_dir: CacheOpt = None) -> None:
    """Rehash every cached artifact; drop entries whose files are damaged."""
    from deploy.pipeline.store.maintenance import verify

    console = _console()
    bad = verify(_store(config, cache_dir, writes=True))  # it drops what is damaged
    for path, problem in bad:
        console.print(
            f"[red]damaged[/] {path.stem[:12]}: {problem} (entry removed; the next run rebuilds it)"
        )
    console.print(f"{len(bad)} damaged entr{'y' if len(bad) == 1 else 'ies'}")
    if bad:
        raise typer.Exit(ExitCode.STAGE)


def ls_table(store: Store) -> Table:
    from deploy.pipeline.store.maintenance import head_keys

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
