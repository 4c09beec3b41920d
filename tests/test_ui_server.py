"""The UI plugin in a real Airflow api-server, over a store filled by real transfers.

Transfers: the example DAG under dag.test() (PCP, several chunks) and two CLI
copies (one tuned, one that fails with permission denied), all against the
test sshd. Then one api-server serves the plugin; every route must answer 401
without Airflow credentials and 200 with them; a headless Chromium logs in,
opens the pages and takes screenshots (into docs/img, for docs/ui.md, when
AT_SCREENSHOT_DIR=docs/img is set).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest

from airflow_transfer.store import Store
from tests.support.airflow_env import REPO, migrate, run_dag, sftp_conn_env
from tests.support.api_server import ApiServer
from tests.support.cli import kill_cli_when, run_cli, ssh_args
from tests.support.data import make_tree

pytestmark = pytest.mark.airflow

PREFIX = "/airflow-transfer"


@pytest.fixture(scope="module")
def ui(tmp_path_factory, sshd, test_base):
    home = tmp_path_factory.mktemp("ui-airflow-home")
    store_url = f"sqlite:///{home / 'ui-store.db'}"
    env = {**migrate(home), "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url}
    work = test_base / "ui"
    work.mkdir(exist_ok=True)
    remote = work / "remote"
    remote.mkdir(exist_ok=True)
    os.chmod(remote, 0o777)
    src = make_tree(work / "src", small=200, big_mib=6, seed=31)

    result, log = run_dag(
        env,
        REPO / "dags" / "example_sftp_copy.py",
        "example_sftp_copy",
        {"src": str(src), "dst": str(remote / "dag"), "conn_id": "at_ui_sftp", "algorithm": "pcp"},
        extra_env=sftp_conn_env("at_ui_sftp", sshd),
    )
    assert result["state"].endswith("success"), log[-4000:]
    dag_summary = result["xcom"]["copy_dataset.return_value"]

    dst = f"sftp://{sshd.user}@{sshd.host}:{sshd.port}"
    cli_env = {"AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url}
    # any:// lets the host-protocol library probe the host (sftp answers; nothing listens on port 1 for ftp)
    anywhere = f"any://{sshd.user}@{sshd.host}{remote}/cli?sftp={sshd.port}&ftp=1&prefer=sftp,ftp"
    tuned = run_cli(
        "copy",
        str(src),
        anywhere,
        "--algorithm",
        "mc",
        "--rtt-ms",
        "20",
        "--bandwidth-mbit",
        "1000",
        "--json",
        *ssh_args(sshd),
        env=cli_env,
    )
    assert tuned.code == 0, tuned.err[-2000:]
    partial = remote / "partial"
    for i in range(3):  # owned by root: the sshd's user cannot write the files of d1/e*
        (partial / "d1" / f"e{i}").mkdir(parents=True, exist_ok=True)
    os.chmod(partial, 0o777)
    failing = run_cli("copy", str(src), f"{dst}{partial}", "--retries", "1", "--json", *ssh_args(sshd), env=cli_env)
    assert failing.code != 0 and failing.summary["failed"], failing.err[-2000:]

    # A key the sshd does not accept: the copy fails at the login, before any file.
    refused = run_cli(
        "copy",
        str(src),
        f"{dst}{remote}/refused",
        "--transfer-key",
        "ui-refused-key",
        "--identity",
        str(sshd.other_key),
        "--known-hosts",
        str(sshd.known_hosts),
        env=cli_env,
    )
    assert refused.code == 1 and "authentication" in refused.err, refused.err[-2000:]
    # A copy stopped by Ctrl-C (SIGINT) once it has finished some files.
    many = make_tree(work / "many", small=2500, seed=32)
    with Store.open(store_url) as store:

        def some_done() -> bool:
            found = [r for r in store.list_transfers(key_prefix="ui-interrupted") if r.key == "ui-interrupted"]
            return bool(found) and store.journal_counts(found[0].id).get("done", {}).get("files", 0) >= 20

        code = kill_cli_when(
            ["copy", str(many), f"{dst}{remote}/interrupted", "--transfer-key", "ui-interrupted"]
            + ["--algorithm", "fixed", "--pp", "2", "-c", "1", *ssh_args(sshd)],
            some_done,
            sig=signal.SIGINT,
            env=cli_env,
        )
    assert code == 130

    profiled = run_cli(
        "profile", f"{dst}{remote}", "--quick", "--via", "ssh", "--json", *ssh_args(sshd), env=cli_env, timeout=600
    )
    assert profiled.code == 0, profiled.err[-2000:]

    server = ApiServer(env, home / "api-server.log").start()
    try:
        yield {
            "server": server,
            "env": env,
            "dag_summary": dag_summary,
            "run_xcom": result,
            "tuned": tuned.summary,
            "store_url": store_url,
            "sshd_port": sshd.port,
            "failing_key": failing.summary["transfer_key"],
        }
    finally:
        server.stop()


def _auth(ui) -> dict:
    return {"Authorization": f"Bearer {ui['server'].token()}"}


def _app_paths(env: dict) -> list[str]:
    """Every route the plugin app declares, from the app itself (so a new route cannot dodge the test)."""
    code = (
        "import json; from airflow_transfer.plugins.app import create_app; "
        "print(json.dumps([r.path for r in create_app('sqlite://').routes]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _concrete(path: str, transfer_id: int) -> str:
    return (path.replace("{transfer_id}", str(transfer_id)) + ("?key=x" if path == "/by-key" else "")).replace(
        "//", "/"
    )


def test_every_route_needs_airflow_auth(ui):
    server = ui["server"]
    paths = _app_paths(ui["env"])
    assert {"/", "/transfers/{transfer_id}", "/tuning", "/protocols", "/api/transfers"} <= set(paths)
    transfer_id = ui["dag_summary"]["transfer_id"]
    # FastAPI's own /docs and /openapi.json would be public: they must not exist
    for path in [*paths, "/docs", "/openapi.json", "/redoc"]:
        url = f"{server.url}{PREFIX}{_concrete(path, transfer_id)}"
        anonymous = httpx.get(url, timeout=30)
        assert (
            anonymous.status_code in (401, 404)
            if path in ("/docs", "/openapi.json", "/redoc")
            else anonymous.status_code == 401
        ), (path, anonymous.status_code, anonymous.text[:300])
        if path in ("/docs", "/openapi.json", "/redoc"):
            assert httpx.get(url, headers=_auth(ui), timeout=30).status_code == 404, path
            continue
        forged = httpx.get(url, headers={"Authorization": "Bearer not-a-token"}, timeout=30)
        assert forged.status_code in (401, 403), (path, forged.status_code)
        authed = httpx.get(url, headers=_auth(ui), timeout=30)
        expected = 404 if path == "/by-key" else 200  # no transfer has the key "x"
        assert authed.status_code == expected, (path, authed.status_code, authed.text[:500])


def test_a_browser_without_login_gets_a_401_page_with_a_login_link(ui):
    resp = httpx.get(f"{ui['server'].url}{PREFIX}/", headers={"Accept": "text/html"}, timeout=30)
    assert resp.status_code == 401
    assert "Log in" in resp.text and "/auth/login" in resp.text


def test_transfers_list_and_filters(ui):
    server, headers = ui["server"], _auth(ui)
    everything = httpx.get(f"{server.url}{PREFIX}/api/transfers", headers=headers, timeout=30).json()
    states = sorted(t["state"] for t in everything["transfers"])
    assert states == ["failed", "failed", "interrupted", "succeeded", "succeeded"]
    assert everything["dag_ids"] == ["example_sftp_copy"]

    one_dag = httpx.get(
        f"{server.url}{PREFIX}/api/transfers", params={"dag_id": "example_sftp_copy"}, headers=headers, timeout=30
    ).json()["transfers"]
    assert [t["id"] for t in one_dag] == [ui["dag_summary"]["transfer_id"]]
    assert one_dag[0]["airflow"]["task_id"] == "copy_dataset"

    failed = httpx.get(
        f"{server.url}{PREFIX}/api/transfers", params={"state": "failed"}, headers=headers, timeout=30
    ).json()["transfers"]
    assert {t["key"] for t in failed} == {"ui-refused-key", ui["failing_key"]}
    (files_failed,) = [t for t in failed if t["key"] != "ui-refused-key"]
    assert files_failed["airflow"] is None and files_failed["failed"] > 0

    html = httpx.get(f"{server.url}{PREFIX}/", params={"state": "succeeded"}, headers=headers, timeout=30)
    assert html.status_code == 200 and html.text.count('class="transfer-row"') == 2
    bad = httpx.get(f"{server.url}{PREFIX}/api/transfers", params={"state": "exploded"}, headers=headers, timeout=30)
    assert bad.status_code == 400 and "unknown state" in bad.text


def test_transfer_page_shows_each_chunk_with_its_knobs(ui):
    server, headers, summary = ui["server"], _auth(ui), ui["dag_summary"]
    tid = summary["transfer_id"]
    detail = httpx.get(f"{server.url}{PREFIX}/api/transfers/{tid}", headers=headers, timeout=30).json()
    assert len(summary["chunks"]) >= 2
    assert [(c["pp"], c["p"], c["cc"], c["files"]) for c in detail["chunks"]] == [
        (c["pp"], c["p"], c["cc"], c["files"]) for c in summary["chunks"]
    ]
    assert detail["journal"]["counts"]["done"]["files"] == summary["files"]
    assert detail["journal"]["percent"] == 100.0
    starts = [c["t0"] for c in detail["chunks"]]
    assert starts == sorted(starts) and starts[0] == 0.0

    page = httpx.get(f"{server.url}{PREFIX}/transfers/{tid}", headers=headers, timeout=30)
    assert page.status_code == 200
    assert page.text.count('class="chunk-row"') == len(summary["chunks"])
    assert page.text.count('<g class="chunk">') == len(summary["chunks"])
    # A healthy copy through a DAG: its summary says no SSH connection was lost, and the page shows it.
    assert summary["connections_lost"] == detail["connections_lost"] == 0
    assert '<div class="v">0</div><div class="k">SSH connections lost</div>' in page.text
    svg = httpx.get(f"{server.url}{PREFIX}/transfers/{tid}/chunks.svg", headers=headers, timeout=30)
    assert svg.headers["content-type"].startswith("image/svg+xml") and svg.text.startswith("<svg")

    failed_id = next(
        t["id"]
        for t in httpx.get(
            f"{server.url}{PREFIX}/api/transfers", params={"state": "failed"}, headers=headers, timeout=30
        ).json()["transfers"]
        if t["key"] == ui["failing_key"]
    )
    failed = httpx.get(f"{server.url}{PREFIX}/api/transfers/{failed_id}", headers=headers, timeout=30).json()
    assert failed["failed_files"]["total"] > 0
    assert "ermission denied" in failed["failed_files"]["rows"][0]["last_error"]
    missing = httpx.get(f"{server.url}{PREFIX}/api/transfers/999999", headers=headers, timeout=30)
    assert missing.status_code == 404


def test_task_instance_extra_link_leads_to_its_transfer(ui):
    server, headers = ui["server"], _auth(ui)
    run_id = _run_id(ui)
    resp = httpx.get(
        f"{server.url}/api/v2/dags/example_sftp_copy/dagRuns/{run_id}/taskInstances/copy_dataset/links",
        headers=headers,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    link = resp.json()["extra_links"]["Transfer"]
    # relative unless [api] base_url was set where the task ran (dag.test() here does not set it)
    assert urlsplit(link).path == f"{PREFIX}/by-key"
    assert parse_qs(urlsplit(link).query)["key"] == [ui["dag_summary"]["transfer_key"]]
    hop = httpx.get(urljoin(server.url, link), headers=headers, timeout=30, follow_redirects=False)
    assert hop.status_code == 307
    assert urlsplit(hop.headers["location"]).path == f"{PREFIX}/transfers/{ui['dag_summary']['transfer_id']}"


def _run_id(ui) -> str:
    key = ui["dag_summary"]["transfer_key"]  # airflow:<dag>/<task>/<run>/<map index>
    return key.split("/", 2)[2].rsplit("/", 1)[0]


def test_plugin_is_listed_with_its_nav_entry(ui):
    server, headers = ui["server"], _auth(ui)
    plugins = httpx.get(f"{server.url}/api/v2/plugins", headers=headers, timeout=30).json()["plugins"]
    ours = next(p for p in plugins if p["name"] == "airflow_transfer")
    assert ours["fastapi_apps"][0]["url_prefix"] == PREFIX
    assert ours["external_views"][0]["href"] == f"{PREFIX}/"


def test_tuning_library_page_shows_what_the_profiler_stored(ui):
    server, headers = ui["server"], _auth(ui)
    data = httpx.get(f"{server.url}{PREFIX}/api/tuning", headers=headers, timeout=30).json()
    assert data["recorded"] and len(data["tuned"]) == 2  # both directions of the sshd <-> localhost pair
    assert {(t["source_host"], t["dest_host"]) for t in data["tuned"]} == {
        ("localhost", f"127.0.0.1:{ui['sshd_port']}"),
        (f"127.0.0.1:{ui['sshd_port']}", "localhost"),
    }
    page = httpx.get(f"{server.url}{PREFIX}/tuning", headers=headers, timeout=30)
    assert page.status_code == 200
    assert page.text.count('class="tuned-row"') == 2
    assert page.text.count('class="profile-row"') == len(data["profiles"]) > 0


def test_host_protocol_page_shows_the_probed_sshd(ui):
    server, headers = ui["server"], _auth(ui)
    data = httpx.get(f"{server.url}{PREFIX}/api/protocols", headers=headers, timeout=30).json()
    sftp = [e for e in data["entries"] if e["protocol"] == "sftp" and e["port"] == ui["sshd_port"]]
    assert sftp and sftp[0]["available"] and sftp[0]["checked_at"]
    assert [e["available"] for e in data["entries"] if e["protocol"] == "ftp"] == [False]
    page = httpx.get(f"{server.url}{PREFIX}/protocols", headers=headers, timeout=30)
    assert page.status_code == 200
    assert page.text.count('class="host-protocol-row"') == len(data["entries"])


# --- browser -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where the page screenshots go: a temporary directory, so a test run leaves the checkout
    clean; AT_SCREENSHOT_DIR=docs/img refreshes the ones docs/ui.md shows."""
    chosen = os.environ.get("AT_SCREENSHOT_DIR")
    path = (REPO / chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser():
    setup = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-browser.sh")], capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stderr[-2000:]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1360,1000",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, condition, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(condition)


def _log_in(driver, server: ApiServer) -> None:
    """Through Airflow's own login form, as a person would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(f"{server.url}/auth/login")
    password = _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "input[type=password]"))
    username = driver.find_element(By.CSS_SELECTOR, "form input:not([type=password])")
    username.send_keys("admin")
    password.send_keys(server.password("admin"), Keys.ENTER)
    _wait(driver, lambda d: d.get_cookie("_token") is not None)


def _full_page_screenshot(driver, path) -> None:
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    full = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, max(height, full + 20))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(width, height)


def test_browser_logs_in_and_sees_transfers_and_chunks(ui, browser, shots):
    from selenium.webdriver.common.by import By

    server, summary = ui["server"], ui["dag_summary"]
    browser.get(f"{server.url}{PREFIX}/")
    assert "Log in first" in browser.page_source  # no cookie yet: the 401 page

    _log_in(browser, server)
    browser.get(f"{server.url}{PREFIX}/")
    rows = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.transfer-row"))
    assert len(rows) == 5
    assert "example_sftp_copy" in rows[-1].text or any("example_sftp_copy" in r.text for r in rows)
    browser.save_screenshot(str(shots / "ui-transfers.png"))

    browser.get(f"{server.url}{PREFIX}/transfers/{summary['transfer_id']}")
    chunk_rows = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.chunk-row"))
    assert len(chunk_rows) == len(summary["chunks"])
    first = chunk_rows[0].find_elements(By.TAG_NAME, "td")
    c0 = summary["chunks"][0]
    assert [td.text for td in first[1:5]] == [str(c0["pp"]), str(c0["p"]), str(c0["cc"]), str(c0["files"])]
    chart = browser.find_element(By.CSS_SELECTOR, "svg.chunk-chart")
    assert chart.size["width"] > 400 and chart.size["height"] > 200  # laid out, not an empty box
    assert len(chart.find_elements(By.CSS_SELECTOR, "g.chunk rect")) == len(summary["chunks"])
    _full_page_screenshot(browser, shots / "ui-transfer.png")

    failed_id = next(
        t["id"]
        for t in httpx.get(
            f"{server.url}{PREFIX}/api/transfers", params={"state": "failed"}, headers=_auth(ui), timeout=30
        ).json()["transfers"]
        if t["key"] == ui["failing_key"]
    )
    browser.get(f"{server.url}{PREFIX}/transfers/{failed_id}")
    failed_rows = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "table.failed tbody tr"))
    assert failed_rows and "ermission denied" in failed_rows[0].text

    browser.get(f"{server.url}{PREFIX}/tuning")
    assert _wait(browser, lambda d: d.find_element(By.TAG_NAME, "h1")).text == "Tuning library"
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.tuned-row")) == 2
    _full_page_screenshot(browser, shots / "ui-tuning.png")

    browser.get(f"{server.url}{PREFIX}/protocols")
    rows = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.host-protocol-row"))
    assert {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows} == {"sftp", "ftp"}
    browser.save_screenshot(str(shots / "ui-protocols.png"))


def _row_of(driver, key: str):
    from selenium.webdriver.common.by import By

    rows = _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.transfer-row"))
    (row,) = [r for r in rows if key in r.text]
    return row


def test_browser_shows_a_refused_login_failed_and_a_ctrl_c_interrupted_on_the_list_and_their_pages(ui, browser):
    """The states a person sees for a CLI copy whose key the server refused and one stopped by Ctrl-C."""
    from selenium.webdriver.common.by import By

    server = ui["server"]
    if browser.get_cookie("_token") is None:
        _log_in(browser, server)
    cases = {
        "ui-refused-key": ("failed", "authentication as"),
        "ui-interrupted": ("interrupted", "interrupted (SIGINT, Ctrl-C)"),
    }
    ids = {}
    for key, (state, error) in cases.items():
        browser.get(f"{server.url}{PREFIX}/")
        row = _row_of(browser, key)
        badge = row.find_element(By.CSS_SELECTOR, "span.state")
        assert badge.text == state and f"state-{state}" in badge.get_attribute("class"), (key, badge.text)
        assert error in row.find_element(By.CSS_SELECTOR, ".row-error").text, row.text
        assert error in badge.get_attribute("title")  # the whole message on hover
        ids[key] = row.find_element(By.CSS_SELECTOR, "td a").text

        browser.get(f"{server.url}{PREFIX}/transfers/{ids[key]}")
        heading = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "h1 span.state"))
        assert heading.text == state
        box = browser.find_element(By.CSS_SELECTOR, ".transfer-error")
        assert box.text.startswith(f"{state.capitalize()}: ") and error in box.text, box.text
        assert "What to do:" in box.text
        assert "no chunks recorded yet" not in browser.page_source.lower()
    # the refused login never reached a chunk; the interrupted copy shows what it finished
    browser.get(f"{server.url}{PREFIX}/transfers/{ids['ui-refused-key']}")
    assert "No chunk ran: the transfer failed first" in browser.find_element(By.CSS_SELECTOR, ".no-chunk-ran").text
    browser.get(f"{server.url}{PREFIX}/transfers/{ids['ui-interrupted']}")
    assert "run the same copy again to resume" in browser.find_element(By.CSS_SELECTOR, ".transfer-error").text


def test_browser_opens_the_page_inside_airflow_navigation(ui, browser, shots):
    """The external view: Airflow's UI shows the plugin's page in its own frame, logged in by cookie."""
    from selenium.webdriver.common.by import By

    server = ui["server"]
    if browser.get_cookie("_token") is None:
        _log_in(browser, server)
    browser.get(f"{server.url}/plugin/airflow-transfer")
    frame = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "iframe"))
    assert urlsplit(frame.get_attribute("src")).path == f"{PREFIX}/"
    browser.switch_to.frame(frame)
    try:
        rows = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.transfer-row"))
        assert len(rows) == 5
    finally:
        browser.switch_to.default_content()
    browser.save_screenshot(str(shots / "ui-in-airflow.png"))
