"""What the package's sensors share: poke from a worker, or wait in the triggerer (the default)."""

from __future__ import annotations

from abc import abstractmethod
from datetime import timedelta
from typing import Any, ClassVar

from airflow.sdk import BaseSensorOperator
from airflow.triggers.base import BaseTrigger


class DeferrableSensor(BaseSensorOperator):
    """A sensor that by default defers to its trigger instead of holding a worker slot.

    With ``deferrable=False`` it pokes (``poke()``, BaseSensorOperator's loop). Deferred, it
    resumes in ``execute_complete`` with the trigger's event: an event whose status is
    ``fired_status`` becomes the task's result (``result()``), anything else fails the task
    with the event's message.
    """

    fired_status: ClassVar[str]  # the status of the trigger's event when the wait is over
    waits_for: ClassVar[str]  # what the trigger watches, for the message when no event came

    def __init__(self, *, deferrable: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 30.0)
        super().__init__(**kwargs)
        self.deferrable = deferrable

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
