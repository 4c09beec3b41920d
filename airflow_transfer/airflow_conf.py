"""Airflow configuration for airflow-transfer, read in this one place.

[airflow_transfer]
store_url = postgresql+psycopg://user@db/airflow_transfer   (default: SQLite under $AIRFLOW_HOME)

The environment form AIRFLOW__AIRFLOW_TRANSFER__STORE_URL works too (Airflow
maps it onto the same option).
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def store_url() -> str | None:
    from airflow.configuration import conf

    value = conf.get("airflow_transfer", "store_url", fallback=None)
    return value or None


def transfer_key(context) -> str:
    """Stable across retries of one task instance, distinct across runs and map indexes."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return f"airflow:{ti.dag_id}/{ti.task_id}/{ti.run_id}/{map_index}"
