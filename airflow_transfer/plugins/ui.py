"""AirflowPlugin for the airflow-transfer UI (registered by the ``airflow.plugins`` entry point).

Thin and cheap to import (every Airflow process that loads plugins imports it):
the FastAPI app is built by app.create_app on the api-server's first request.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .app import URL_PREFIX, LazyApp, create_app


class AirflowTransferPlugin(AirflowPlugin):
    name = "airflow_transfer"
    fastapi_apps = [{"app": LazyApp(create_app), "url_prefix": URL_PREFIX, "name": "airflow-transfer"}]
    external_views = [
        {
            "name": "Transfers",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "airflow-transfer",
        },
    ]
