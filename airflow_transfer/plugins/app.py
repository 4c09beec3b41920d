"""The UI's FastAPI app: HTML pages and JSON over the store, behind Airflow's authentication.

Airflow mounts plugin apps without any authentication of their own, so the
app declares Airflow's "authenticated user" dependency for every route and
turns off FastAPI's /docs and /openapi.json (they would bypass it). Users see
transfers of the DAGs they may read, plus transfers run outside Airflow (CLI).

Everything heavy is imported inside ``create_app`` so that loading the plugin
(which every Airflow process does) stays cheap. No ``from __future__ import
annotations`` here: FastAPI must see the real types of the route parameters,
which are imported inside ``create_app``.
"""

import json
import re
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from .. import airflow_conf
from . import charts

# An ASGI application: (scope, receive, send) -> awaitable.
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

URL_PREFIX = "/airflow-transfer"
TEMPLATES = Path(__file__).with_name("templates")


def _size(value: Any) -> str:
    if value is None:
        return ""
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(value)


def _mbit(value: Any) -> str:
    return "" if value is None else f"{float(value):.1f}"


def _secs(value: Any) -> str:
    if value is None:
        return ""
    s = float(value)
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    return f"{m} min {s} s" if m < 60 else f"{m // 60} h {m % 60} min"


def _when(value: Any) -> str:
    if not value:
        return ""
    text = re.sub(r"\.\d+", "", str(value))  # whole seconds are enough on a page
    return text.replace("T", " ").replace("+00:00", " UTC")


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return "" if value is None else str(value)


def jinja_env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))
    env.filters.update(size=_size, mbit=_mbit, secs=_secs, when=_when, cell=_cell)
    return env


def transfer_page(env: Environment, data: dict, *, base: str = "", user: str | None = None) -> str:
    """The HTML page of one transfer from its views.transfer_detail() dict (the JSON API's body)."""
    chart = charts.chunk_chart(data["chunks"], average_mbit=data["transfer"]["throughput_mbit"])
    progress = charts.progress_bar(data["journal"]["counts"])
    return env.get_template("transfer.html").render(
        base=base, user=user, page=data, nav="transfers", chart_svg=chart, progress_svg=progress
    )


class _StoreHolder:
    """Opens the store on first use (the api-server may start before the database is reachable)."""

    def __init__(self, url: str | None = None) -> None:
        self._url, self._store, self._lock = url, None, threading.Lock()

    def get(self):
        with self._lock:
            if self._store is None:
                # heavy: the store loads pyarrow (~0.1 s on top of Airflow); only the api-server opens it
                from ..store import Store

                self._store = Store.open(self._url if self._url is not None else airflow_conf.store_url())
            return self._store


class LazyApp:
    """An ASGI app that builds the real one (``factory()``) on its first request.

    Every Airflow process that loads plugins imports the plugin module, task
    runners included; only the api-server ever serves a request, so only it
    pays for FastAPI and Airflow's security module.
    """

    def __init__(self, factory: Callable[[], ASGIApp]) -> None:
        self._factory = factory
        self._app: ASGIApp | None = None
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        app = self._app
        if app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._factory()
                app = self._app
        await app(scope, receive, send)

    def __repr__(self) -> str:
        return f"LazyApp({self._factory.__module__}.{self._factory.__qualname__})"


LIBRARY_PAGES = {
    "tuning": (
        "Tuning library",
        "Profiles measured per host and host pair, and the parameters the tuner derived from them.",
        "Run the profiling DAG or `airflow-transfer profile HOST [HOST2]` to fill it.",
    ),
    "protocols": (
        "Host protocols",
        "Which protocols each host offers, as last probed, with the probe time.",
        "Probes run when a transfer resolves an any:// URL (docs/protocols.md).",
    ),
}


def create_app(store_url: str | None = None):
    """The FastAPI app mounted at ``/airflow-transfer`` by the plugin (``store_url`` for tests)."""
    # heavy: FastAPI with Airflow's API security module (~0.5 s) and the store's views (pyarrow, ~0.1 s)
    # load in the api-server on its first request, not in every process that loads plugins
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_authenticated
    from fastapi import Depends, FastAPI, HTTPException, Query, Request
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.responses import HTMLResponse, RedirectResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from ..store import StoreError
    from . import views

    app = FastAPI(
        title="airflow-transfer",
        dependencies=[Depends(requires_authenticated())],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # would be public routes
    )
    holder = _StoreHolder(store_url)
    env = jinja_env()

    def base(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/")

    def readable_dags(user) -> set[str] | None:
        return get_auth_manager().get_authorized_dag_ids(user=user, method="GET")

    def store():
        try:
            return holder.get()
        except StoreError as exc:
            raise HTTPException(503, f"cannot open the transfer store: {exc}") from None

    def user_name(user) -> str | None:
        return getattr(user, "get_name", lambda: None)() if user is not None else None

    def page(request: Request, template: str, user, status: int = 200, **values) -> HTMLResponse:
        html = env.get_template(template).render(base=base(request), user=user_name(user), **values)
        return HTMLResponse(html, status_code=status)

    def detail_or_404(transfer_id: int, user) -> dict:
        detail = views.transfer_detail(store(), transfer_id)
        if detail is None:
            raise HTTPException(404, f"no transfer {transfer_id} in the store")
        parts = detail["transfer"]["airflow"]
        allowed = readable_dags(user)
        if parts and allowed is not None and parts["dag_id"] not in allowed:
            raise HTTPException(403, f"you may not read DAG {parts['dag_id']}")
        return detail

    def listing(user, dag_id: str | None, state: str | None, limit: int) -> dict:
        try:
            return views.list_transfers(
                store(), dag_id=dag_id or None, state=state or None, readable_dags=readable_dags(user), limit=limit
            )
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None

    @app.exception_handler(StarletteHTTPException)
    async def html_errors(request: Request, exc: StarletteHTTPException):
        # Browsers get a readable page (with a way to log in on 401); API clients the usual JSON.
        if "text/html" not in request.headers.get("accept", ""):
            return await http_exception_handler(request, exc)
        login_url = None
        if exc.status_code == 401:
            try:
                login_url = get_auth_manager().get_url_login(next_url=str(request.url))
            except Exception:  # noqa: BLE001 - the page still says what is wrong
                login_url = None
        headings = {401: "Log in first", 403: "Not allowed", 404: "Not found", 503: "Store unavailable"}
        html = env.get_template("message.html").render(
            base=base(request),
            user=None,
            heading=headings.get(exc.status_code, "Error"),
            message=exc.detail,
            login_url=login_url,
            nav=None,
        )
        return HTMLResponse(html, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    # --- pages ---------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def transfers_page(
        request: Request,
        user: GetUserDep,
        dag_id: str | None = None,
        state: str | None = None,
        limit: int = Query(100, ge=1, le=1000),
    ):
        data = listing(user, dag_id, state, limit)
        query = request.url.query
        return page(request, "transfers.html", user, page=data, nav="transfers", query=f"?{query}" if query else "")

    @app.get("/transfers/{transfer_id}", response_class=HTMLResponse)
    def transfer_html(request: Request, transfer_id: int, user: GetUserDep):
        data = detail_or_404(transfer_id, user)
        return HTMLResponse(transfer_page(env, data, base=base(request), user=user_name(user)))

    @app.get("/transfers/{transfer_id}/chunks.svg")
    def transfer_chart(transfer_id: int, user: GetUserDep):
        data = detail_or_404(transfer_id, user)
        svg = charts.chunk_chart(data["chunks"], average_mbit=data["transfer"]["throughput_mbit"])
        return Response(svg, media_type="image/svg+xml")

    @app.get("/by-key")
    def by_key(request: Request, key: str, user: GetUserDep):
        """Where the task instance's extra link lands: the newest transfer under that key."""
        record = views.latest_for_key(store(), key)
        if record is None:
            raise HTTPException(
                404, f"no transfer recorded under key {key!r} yet (the task may not have started its transfer)"
            )
        return RedirectResponse(f"{base(request)}/transfers/{record.id}", status_code=307)

    def library_page(request: Request, user, which: str, template: str, data: dict) -> HTMLResponse:
        heading, blurb, how = LIBRARY_PAGES[which]
        return page(request, template, user, page=data, nav=which, heading=heading, blurb=blurb, how_to_fill=how)

    @app.get("/tuning", response_class=HTMLResponse)
    def tuning_page(request: Request, user: GetUserDep):
        return library_page(request, user, "tuning", "tuning.html", views.tuning(store()))

    @app.get("/protocols", response_class=HTMLResponse)
    def protocols_page(request: Request, user: GetUserDep):
        return library_page(request, user, "protocols", "protocols.html", views.protocols(store()))

    # --- JSON ----------------------------------------------------------------------

    @app.get("/api/transfers")
    def transfers_json(
        user: GetUserDep, dag_id: str | None = None, state: str | None = None, limit: int = Query(100, ge=1, le=1000)
    ):
        return listing(user, dag_id, state, limit)

    @app.get("/api/transfers/{transfer_id}")
    def transfer_json(transfer_id: int, user: GetUserDep):
        return detail_or_404(transfer_id, user)

    @app.get("/api/tuning")
    def tuning_json():
        return views.tuning(store())

    @app.get("/api/protocols")
    def protocols_json():
        return views.protocols(store())

    return app
