"""What the package's sensors share: poke from a worker, or wait in the triggerer."""

from __future__ import annotations

from abc import abstractmethod
from datetime import timedelta
from typing import Any, ClassVar

from airflow.sdk import BaseSensorOperator
from airflow.triggers.base import BaseTrigger

from .. import airflow_conf


class DeferrableSensor(BaseSensorOperator):
    """A sensor that can defer to its trigger instead of holding a worker slot.

    ``deferrable`` defaults to Airflow's ``[operators] default_deferrable`` (False unless set),
    as for Airflow's own sensors. Without deferring it pokes (``poke()``, BaseSensorOperator's
    loop). Deferred, it resumes in ``execute_complete`` with the trigger's event: an event whose
    status is ``fired_status`` becomes the task's result (``result()``), anything else fails the
    task with the event's message.
    """

    fired_status: ClassVar[str]  # the status of the trigger's event when the wait is over
    waits_for: ClassVar[str]  # what the trigger watches, for the message when no event came

    def __init__(self, *, deferrable: bool | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 30.0)
        super().__init__(**kwargs)
        self.deferrable = airflow_conf.default_deferrable() if deferrable is None else bool(deferrable)

    @abstractmethod
    def trigger(self) -> BaseTrigger:
        """The trigger to wait in (built when the task runs, from the rendered arguments)."""

    @abstractmethod
    def result(self, event: dict) -> dict:
        """The task's return value (XCom) from the trigger's event."""

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        self.defer(
            trigger=self.trigger(),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict | None = None) -> dict:
        """Resume after the trigger fired: return its result, or fail with its message."""
        if not event or event.get("status") != self.fired_status:
            raise RuntimeError((event or {}).get("message", f"the {self.waits_for} trigger ended without an event"))
        return self.result(event)
