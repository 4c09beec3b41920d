"""Start-up work of the `airflow-transfer` program that the copy commands share."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_program = False  # set by the program's entry point, never by code that calls cli.main in its own process


def program_started() -> None:
    """The `airflow-transfer` program runs (cli.run): its imports may be frozen, see below."""
    global _program
    _program = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a copy's modules are imported.

    Importing pyarrow, NumPy, SQLAlchemy, paramiko and the engine creates hundreds of
    thousands of objects that all stay alive; the collector, started every 700 new ones,
    walked them again and again for nothing. In the program, they are then moved out of the
    collector's sight (gc.freeze), so the first full collection during the copy does not walk
    them either; a process that calls cli.main itself (a test, a script) keeps its collector
    as it was. Garbage made meanwhile waits for the next collection. A collector the caller
    had paused stays paused. What it saves is in docs/transfers.md ("Start and exit")."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if _program:
            gc.freeze()
        gc.enable()
