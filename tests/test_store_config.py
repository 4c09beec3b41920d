"""Store URL resolution and password masking."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_transfer.store import Store, StoreError
from airflow_transfer.store.config import ENV_VAR, mask_url, resolve_store_url
from tests.support.sshd import free_port


def test_explicit_url_wins_over_environment(tmp_path: Path) -> None:
    env = {ENV_VAR: "postgresql+psycopg://u@envhost/db", "AIRFLOW_HOME": str(tmp_path)}
    assert resolve_store_url("postgresql+psycopg://u@arghost/db", env) == "postgresql+psycopg://u@arghost/db"


def test_environment_wins_over_default(tmp_path: Path) -> None:
    env = {ENV_VAR: "  postgresql+psycopg://u@envhost/db  ", "AIRFLOW_HOME": str(tmp_path)}
    assert resolve_store_url(None, env) == "postgresql+psycopg://u@envhost/db"
    assert resolve_store_url("", env) == "postgresql+psycopg://u@envhost/db"


def test_default_is_a_sqlite_file_in_airflow_home(tmp_path: Path) -> None:
    home = tmp_path / "airflow-home"
    url = resolve_store_url(None, {"AIRFLOW_HOME": str(home), ENV_VAR: ""})
    assert url == f"sqlite:///{home.resolve()}/airflow_transfer.db"
    assert home.is_dir()


def test_default_without_airflow_home_is_under_the_users_home_and_the_directory_is_created(tmp_path: Path) -> None:
    url = resolve_store_url(None, {"HOME": str(tmp_path)})
    assert url == f"sqlite:///{tmp_path.resolve()}/.airflow-transfer/store.db"
    assert (tmp_path / ".airflow-transfer").is_dir()


def test_a_plain_path_means_a_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_store_url("rel/at.db", {}) == f"sqlite:///{tmp_path.resolve()}/rel/at.db"
    assert resolve_store_url("/data/at.db", {}) == "sqlite:////data/at.db"


def test_heroku_style_postgres_scheme_is_accepted() -> None:
    assert resolve_store_url("postgres://u@h/db", {}) == "postgresql://u@h/db"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql+psycopg://postgres:s3cr%40t@db:5432/x", "postgresql+psycopg://postgres:***@db:5432/x"),
        ("postgresql://u:pa/ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u@h/db?password=abc&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ("sftp://u:pw@h/data/a@b", "sftp://u:***@h/data/a@b"),
        # no password: nothing changes, an '@' in the path is not a password
        ("sftp://host/data/user@example.org/f", "sftp://host/data/user@example.org/f"),
        ("sftp://host:22/data/f", "sftp://host:22/data/f"),
        # ambiguous (port + '@' in the path, or an unencoded password): masked, never leaked
        ("sftp://host:22/data/user@example.org/f", "sftp://host:***@example.org/f"),
        ("sftp://u@h/p", "sftp://u@h/p"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ],
)
def test_mask_url_examples(url: str, expected: str) -> None:
    assert mask_url(url) == expected


_password = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=4, max_size=24).filter(
    lambda p: "***" not in p
)


@settings(max_examples=150, deadline=None)
@given(_password, st.sampled_from(["postgresql+psycopg", "postgresql", "sftp", "mysql+pymysql"]))
def test_masked_url_never_contains_the_password_raw_or_encoded(password: str, scheme: str) -> None:
    # Percent-encoded (what a URL must hold) with any characters; raw with any
    # but '@' — a raw '@' followed by '/' makes even the database driver read
    # a different password (the '@' cases are in the examples above).
    written_forms = [quote(password, safe="")] + ([password] if "@" not in password else [])
    for written in written_forms:
        url = f"{scheme}://someone:{written}@db.example.org:5432/dbname?sslmode=require"
        # exact: the whole password, whatever it holds, became *** (a substring
        # test would trip on passwords such as "5432" that occur in the rest)
        assert mask_url(url) == f"{scheme}://someone:***@db.example.org:5432/dbname?sslmode=require"


def test_unreachable_postgres_gives_a_one_line_error_without_the_password() -> None:
    url = f"postgresql+psycopg://postgres:TopSecret42@127.0.0.1:{free_port()}/nodb"
    with pytest.raises(StoreError) as info:
        Store.open(url)
    message = str(info.value)
    assert "TopSecret42" not in message
    assert "\n" not in message
    assert "postgres:***@127.0.0.1" in message
    assert ENV_VAR in message


def test_missing_driver_is_explained() -> None:
    with pytest.raises(StoreError, match="driver that is not installed") as info:
        Store.open("postgresql+nosuchdriver://u:hunter22@h/db")
    assert "hunter22" not in str(info.value)


def test_sqlite_file_in_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot use the airflow-transfer store"):
        Store.open(f"sqlite:///{tmp_path}/no/such/dir/s.db")
