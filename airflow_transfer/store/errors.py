"""Errors the store raises: one line each, URL masked, saying what to do."""

from __future__ import annotations

from ..errors import TransferError


class StoreError(TransferError):
    """The store could not be opened, migrated or written."""


class UnknownFileError(StoreError):
    """A journal update named a path that the transfer's listing does not hold."""
