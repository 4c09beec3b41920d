"""Airflow configuration for airflow-transfer, read in this one place.

[airflow_transfer]
store_url = postgresql+psycopg://user@db/airflow_transfer   (default: SQLite under $AIRFLOW_HOME)
staging_dir = /shared/airflow-transfer/manifests   (default: $AIRFLOW_HOME/airflow_transfer/manifests)

[operators]
default_deferrable = True   (Airflow's own option; the sensors' default for ``deferrable``)

The environment form AIRFLOW__AIRFLOW_TRANSFER__STORE_URL works too (Airflow
maps it onto the same option).
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from airflow.configuration import conf


@lru_cache(maxsize=1)
def store_url() -> str | None:
    value = conf.get("airflow_transfer", "store_url", fallback=None)
    return value or None


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable``: whether a sensor waits in the triggerer when
    its DAG does not say. Airflow's own deferrable operators read the same option. Read when a
    sensor is built (not cached), so the DAG processor and a test see the current setting."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


def staging_dir() -> str:
    """Where staged manifests go; every worker that runs chunks must read it (a shared
    mount when workers are on several hosts). Next to the default SQLite store otherwise."""
    value = conf.get("airflow_transfer", "staging_dir", fallback=None)
    if value:
        return os.path.expanduser(value)
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    return os.path.join(home, "airflow_transfer", "manifests")


def transfer_key(context: Any) -> str:
    """Stable across retries of one task instance, distinct across runs and map indexes."""
    return transfer_key_for(context["ti"])


def transfer_key_for(ti: Any) -> str:
    """The same key from anything with dag_id, task_id, run_id (and map_index): a TI or its key."""
    map_index = getattr(ti, "map_index", -1)
    if map_index is None:
        map_index = -1
    return f"airflow:{ti.dag_id}/{ti.task_id}/{ti.run_id}/{map_index}"
