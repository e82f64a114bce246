"""A thread that lasts as long as the process, for what must not die with the thread that
asks for it: the stages' fork server gets its parent-death signal (pipeline/process/
lifeline.py) when the *thread* that started it ends, not the process."""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable


def start_fork_server() -> None:
    """The fork server's parent-death signal (lifeline) fires when the *thread* that started
    it ends, not the process: one started by a pipeline's thread (the Python API in a
    thread) died with that thread, and the next thread's stage lost it mid-start (EOFError).
    Off the main thread the server is started by a thread that lasts as long as the process."""
    if threading.current_thread() is threading.main_thread():
        return  # child.start() starts it here, if it has to
    from multiprocessing import forkserver

    _keeper().call(forkserver.ensure_running)


@functools.cache
def _keeper() -> Keeper:
    return Keeper()


class Keeper:
    """A daemon thread that runs what it is handed, one call at a time, until the process ends."""

    def __init__(self) -> None:
        self._calls: queue.Queue[tuple[Callable[[], object], list[BaseException], threading.Event]] = (
            queue.Queue()
        )
        threading.Thread(target=self._serve, name="deploy-fork-server-keeper", daemon=True).start()

    def call(self, fn: Callable[[], object]) -> None:
        raised: list[BaseException] = []
        done = threading.Event()
        self._calls.put((fn, raised, done))
        done.wait()
        if raised:
            raise raised[0]

    def _serve(self) -> None:
        while True:
            fn, raised, done = self._calls.get()
            try:
                fn()
            except BaseException as exc:  # handed back to the caller's thread
                raised.append(exc)
            done.set()
