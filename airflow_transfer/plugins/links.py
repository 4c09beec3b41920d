"""The "Transfer" extra link of a task instance: its page in the airflow-transfer UI."""

from __future__ import annotations

from urllib.parse import urlencode

from airflow.configuration import conf
from airflow.sdk import BaseOperatorLink

from ..airflow_conf import transfer_key_for
from .app import URL_PREFIX


def transfer_page_url(key: str, base_url: str = "") -> str:
    """``<base_url>/airflow-transfer/by-key?key=...``, which redirects to the newest transfer under ``key``."""
    return f"{base_url.rstrip('/')}{URL_PREFIX}/by-key?{urlencode({'key': key})}"


class TransferPageLink(BaseOperatorLink):
    """Links a task instance to the transfer it ran (found by its transfer key).

    Works for any operator with a ``transfer_key`` attribute or a ``chunk`` spec
    carrying one: add ``operator_extra_links = (TransferPageLink(),)`` to the class.
    """

    name = "Transfer"

    def get_link(self, operator, *, ti_key) -> str:
        # The key the task journalled under: a chunk spec's (mapped chunk tasks), an explicit
        # transfer_key on the operator (already rendered here), else the per-task default.
        chunk = getattr(operator, "chunk", None)
        key = (
            (chunk.get("transfer_key") if isinstance(chunk, dict) else None)
            or getattr(operator, "transfer_key", None)
            or transfer_key_for(ti_key)
        )
        return transfer_page_url(key, conf.get("api", "base_url", fallback="") or "")
