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
        "operators": [
            {
                "integration-name": "airflow-transfer",
                "python-modules": [
                    "airflow_transfer.operators.transfer",
                    "airflow_transfer.operators.query",
                    "airflow_transfer.operators.chunked",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "airflow-transfer",
                "python-modules": ["airflow_transfer.sensors.stable", "airflow_transfer.sensors.protocols"],
            }
        ],
        "triggers": [
            {
                "integration-name": "airflow-transfer",
                "python-modules": ["airflow_transfer.triggers.stable", "airflow_transfer.triggers.protocols"],
            }
        ],
        "hooks": [{"integration-name": "airflow-transfer", "python-modules": ["airflow_transfer.hooks.endpoint"]}],
        "extra-links": ["airflow_transfer.plugins.links.TransferPageLink"],
        "integrations": [
            {
                "integration-name": "airflow-transfer",
                "external-doc-url": "https://airflow.apache.org",
                "tags": ["protocol"],
            }
        ],
        # Declared so Airflow knows store_url may hold a database password: "sensitive" makes
        # `airflow config list` and the UI's configuration page hide it, and Airflow masks it in logs.
        "config": {
            "airflow_transfer": {
                "description": "airflow-transfer: where journals, history and the tuning library are kept.",
                "options": {
                    "store_url": {
                        "description": "SQLAlchemy URL of the store (SQLite or PostgreSQL); default: SQLite "
                        "under $AIRFLOW_HOME (docs/store.md).",
                        "version_added": None,
                        "type": "string",
                        "sensitive": True,
                        "example": "postgresql+psycopg://transfer:secret@db.example.org/transfers",
                        "default": None,
                    },
                    "staging_dir": {
                        "description": "Directory for staged manifests of chunked DAGs; every worker that "
                        "runs chunks must read it.",
                        "version_added": None,
                        "type": "string",
                        "example": None,
                        "default": None,
                    },
                },
            },
        },
    }
