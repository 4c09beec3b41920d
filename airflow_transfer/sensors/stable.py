"""DatasetStableSensor: wait until a (remote) directory tree has stopped changing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import PokeReturnValue

from ..errors import TransferError
from ..hooks.endpoint import TransferEndpointHook
from ..operators.failures import task_error
from ..triggers.stable import DatasetStableTrigger
from .deferrable import DeferrableSensor

if TYPE_CHECKING:
    from ..stability import StableWatch


class DatasetStableSensor(DeferrableSensor):
    """Succeed once the tree at `src` has kept the same listing for `stable_for` seconds.

    Typical use: an instrument writes a run directory for hours; replicate it only
    after it stopped changing. Each look lists the tree once (on SFTP hosts with
    the stdlib lister over a single SSH exec, SFTP readdir where exec is not
    allowed) and fingerprints every file's path, size and mtime.

    :param src: tree to watch: ``sftp://[user@]host[:port]/path``, a remote path when
        ``src_conn_id`` is given, or a local path. Templated.
    :param src_conn_id: Airflow ssh/sftp connection of the host. Templated.
    :param stable_for: seconds the listing must stay unchanged (templated; e.g. 600 for an
        instrument that pauses between frames).
    :param poke_interval: seconds between two listings (BaseSensorOperator's argument).
    :param deferrable: wait in the triggerer (DatasetStableTrigger) instead of holding a
        worker slot. Default: Airflow's ``[operators] default_deferrable`` (False unless set).
        Without it use ``mode="poke"``: the unchanged-since time lives in the running task.
    :param timeout: seconds to wait in total before failing (BaseSensorOperator's argument).

    Returns (XCom) the final state: ``{"fingerprint", "files", "bytes", "changes", "held_for"}``.
    """

    template_fields: Sequence[str] = ("src", "src_conn_id", "stable_for")
    ui_color = "#e8f4e0"
    fired_status = "stable"
    waits_for = "stability"

    def __init__(
        self,
        *,
        src: str,
        src_conn_id: str | None = None,
        stable_for: float | str = 300.0,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(deferrable=deferrable, **kwargs)
        self.src, self.src_conn_id, self.stable_for = src, src_conn_id, stable_for
        self._watch: StableWatch | None = None
        if not isinstance(stable_for, str):
            self._stable_seconds()  # fail at parse time on a bad value

    def _stable_seconds(self) -> float:
        try:
            value = float(self.stable_for)
        except (TypeError, ValueError):
            raise ValueError(f"stable_for must be a number of seconds (got {self.stable_for!r})") from None
        if value < 0:
            raise ValueError(f"stable_for must be >= 0 seconds (got {value})")
        return value

    def trigger(self) -> DatasetStableTrigger:
        return DatasetStableTrigger(
            src=self.src,
            conn_id=self.src_conn_id,
            stable_for=self._stable_seconds(),
            poll_interval=float(self.poke_interval),
        )

    def result(self, event: dict) -> dict:
        self.log.info(
            "%s stable for %.0f s: %d files, %d bytes (%d changes seen while waiting)",
            self.src,
            event.get("held_for", 0),
            event["files"],
            event["bytes"],
            event.get("changes", 0),
        )
        return {k: event[k] for k in ("fingerprint", "files", "bytes", "changes", "held_for") if k in event}

    def poke(self, context: Any):
        # heavy: stability lists trees with the engine, pyarrow and NumPy (~0.2 s); DAG files import this module
        from ..stability import StableWatch, tree_state

        if self._watch is None:
            self._watch = StableWatch(self._stable_seconds())
        watch = self._watch
        try:
            state = tree_state(TransferEndpointHook(self.src_conn_id).endpoint(self.src))
        except TransferError as exc:
            raise task_error(exc) from exc
        stable = watch.observe(state)
        self.log.info(
            "%d files, %d bytes; unchanged for %.0f of %.0f s",
            state.files,
            state.bytes,
            watch.held_for(),
            watch.stable_for,
        )
        value = {**state.as_dict(), "changes": watch.changes, "held_for": round(watch.held_for(), 1)}
        return PokeReturnValue(is_done=stable, xcom_value=value if stable else None)
