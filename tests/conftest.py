"""Shared fixtures: a real OpenSSH sshd on loopback and a throwaway remote root."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.support.sshd import SSHServer, chown_to_user


@pytest.fixture(scope="session", autouse=True)
def isolated_store(tmp_path_factory):
    """Every CLI and engine run in the suite journals into a throwaway SQLite store."""
    path = tmp_path_factory.mktemp("store") / "store.db"
    old = os.environ.get("AIRFLOW__AIRFLOW_TRANSFER__STORE_URL")
    os.environ["AIRFLOW__AIRFLOW_TRANSFER__STORE_URL"] = f"sqlite:///{path}"
    yield path
    if old is None:
        os.environ.pop("AIRFLOW__AIRFLOW_TRANSFER__STORE_URL", None)
    else:
        os.environ["AIRFLOW__AIRFLOW_TRANSFER__STORE_URL"] = old


@pytest.fixture(scope="session")
def test_base() -> Path:
    """A world-traversable scratch area: the sshd's user must reach it."""
    base = Path(tempfile.mkdtemp(prefix="at-tests-"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def sshd(test_base: Path) -> SSHServer:
    server = SSHServer(test_base / "sshd").start()
    yield server
    server.stop()


@pytest.fixture
def remote_dir(test_base: Path, sshd: SSHServer) -> Path:
    """An empty directory owned by the sshd's login user."""
    path = test_base / "remote" / uuid.uuid4().hex[:10]
    path.mkdir(parents=True)
    os.chmod(path.parent, 0o755)
    chown_to_user(path, sshd.user)
    return path


@pytest.fixture
def local_dir(test_base: Path) -> Path:
    path = test_base / "local" / uuid.uuid4().hex[:10]
    path.mkdir(parents=True)
    return path


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory):
    """Environment of a migrated temporary Airflow home (SQLite)."""
    from tests.support.airflow_env import migrate

    return migrate(tmp_path_factory.mktemp("airflow-home"))


# Tests that bring up the emulated WAN measure rates and round trips: `make test` runs them
# one at a time in a pytest process of their own, beside the parallel workers at a CPU priority
# they cannot take from, except those also marked `wan_alone`, which run after the workers with
# nothing else on the machine (scripts/run-tests.sh).
_WAN_MARKS = ("wan_testbed", "require_wan", "EmulatedLink", "Testbed(")
_wan_modules: dict[str, bool] = {}


# xdist (--dist loadfile --no-loadscope-reorder) hands modules to idle workers in collection
# order, so a long module collected late runs alone at the end while the other workers wait
# (without that flag xdist puts the modules with the most tests first, and these long modules
# of few tests ran last: 6 of CI's 16 minutes went to its last 6 % of tests). The
# longest modules go first; seconds per module from the clean-clone CI run of 2026-11-25
# (a slow VM, 827 tests in 13:19), longest first.
_LONG_MODULES = (
    "tests.test_profiling_dag",  # ~250 s: two backends, four DAG runs
    "tests.test_provider_dags",  # ~230 s
    "tests.test_durable",  # ~220 s: outages and kills, two backends
    "tests.test_chaos",  # ~150 s: 14 faults over wan50
    "tests.test_ui_server",  # ~150 s: api-server, DAG run, browser
    "tests.test_secrets",  # ~100 s
    "tests.test_example_dag",  # ~80 s
    # from the clean-clone run of 2026-11-27 (1142 tests in 16:04), whose last 6 % of tests
    # took 6 minutes: these ran late
    "tests.test_lineage",  # ~100 s: two DAG runs with OpenLineage
    "tests.test_load_concurrent",  # twenty CLI copies at once, two stores
    "tests.test_connections",  # ~55 s: the airflow CLI
    # from a run of 2026-11-28 (1211 tests in 14:52): these started in the last third and
    # left one worker busy at the end
    "tests.test_lifecycle",  # ~140 s: Airflow task runs, retries, SIGTERM
    "tests.test_bastion",  # ~70 s
    "tests.test_hostile_server",  # ~65 s
    "tests.test_query_operator",  # ~60 s
    "tests.test_verify_blocks",  # ~60 s, CPU-bound
    "tests.test_interop_defects",  # ~55 s
    "tests.test_tuning_library_use",  # ~50 s
)


def _longest_first(items) -> None:
    rank = {name: i for i, name in enumerate(_LONG_MODULES)}
    items.sort(key=lambda item: rank.get(getattr(getattr(item, "module", None), "__name__", ""), len(rank)))


def pytest_collection_modifyitems(config, items) -> None:
    import inspect

    _longest_first(items)  # stable: each module's own order is kept

    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        name = module.__name__
        if name not in _wan_modules:
            try:
                source = inspect.getsource(module)
            except (OSError, TypeError):
                source = ""
            _wan_modules[name] = any(mark in source for mark in _WAN_MARKS)
        # A module whose checks hold under CPU contention (it measures no rates) may say
        # WAN_PARALLEL_OK = True and run with the parallel workers instead.
        if getattr(module, "WAN_PARALLEL_OK", False):
            continue
        if _wan_modules[name] or "wan_testbed" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.wan)
