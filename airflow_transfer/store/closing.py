"""``with`` for the store's objects that hold something (a connection pool, a writer thread) until closed."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """Subclasses define close(); ``with obj:`` calls it on the way out, error or not."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
