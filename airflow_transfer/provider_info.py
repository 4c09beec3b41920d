"""Provider metadata for Airflow's provider discovery (entry point apache_airflow_provider)."""

from __future__ import annotations

from . import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-transfer",
        "name": "airflow-transfer",
        "description": "Tuned (pp/p/cc), verified, resumable dataset transfers over SFTP and more.",
        "versions": [__version__],
        "connection-types": [],
        "operators": [{"integration-name": "airflow-transfer",
                       "python-modules": ["airflow_transfer.operators.transfer"]}],
        "hooks": [{"integration-name": "airflow-transfer",
                   "python-modules": ["airflow_transfer.hooks.endpoint"]}],
        "integrations": [{"integration-name": "airflow-transfer", "external-doc-url": "https://airflow.apache.org",
                          "tags": ["protocol"]}],
    }
