"""A thread that lasts as long as the process, for what must not die with the thread that
asks for it: the stages' fork server gets its parent-death signal (pipeline/process/
lifeline.py) when the *thread* that started it ends, not the process."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor


def start_fork_server() -> None:
    """The fork server's parent-death signal (lifeline) fires when the *thread* that started
    it ends, not the process: one started by a pipeline's thread (the Python API in a
    thread) died with that thread, and the next thread's stage lost it mid-start (EOFError).
    Off the main thread the server is started by a thread that lasts as long as the process."""
    if threading.current_thread() is threading.main_thread():
        return  # child.start() starts it here, if it has to
    from multiprocessing import forkserver

    _keeper().submit(forkserver.ensure_running).result()  # its errors raised here


@functools.cache
def _keeper() -> ThreadPoolExecutor:
    """One worker, made on the first call and idle until the interpreter exits."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="deploy-fork-server-keeper")
