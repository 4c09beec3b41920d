"""What the package's triggers share: how the triggerer gets them back from the database."""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger


class PlainTrigger(BaseTrigger):
    """A trigger that serializes to its class path and the plain values named in ``serialized``.

    Those names are the keyword arguments of the subclass's ``__init__`` and its attributes of
    the same name, so the triggerer rebuilds it with ``cls(**kwargs)``; nothing else is kept.
    """

    serialized: ClassVar[tuple[str, ...]] = ()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            name: getattr(self, name) for name in self.serialized
        }
