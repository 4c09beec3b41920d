"""Where the store lives, and how to print that place without leaking secrets.

Resolution order (first that is set wins):

1. the ``url`` argument (the operator/CLI passes ``[airflow_transfer] store_url``
   or ``--store`` here; Airflow's own config reader lives outside the core);
2. the environment variable ``AIRFLOW__AIRFLOW_TRANSFER__STORE_URL`` — the
   name Airflow itself gives to ``[airflow_transfer] store_url``, so one
   setting serves Airflow workers, the CLI and plain Python;
3. a SQLite file: ``$AIRFLOW_HOME/airflow_transfer.db`` when AIRFLOW_HOME is
   set, else ``~/.airflow-transfer/store.db``.

A value without ``://`` is taken as a SQLite file path, so ``--store
/data/at.db`` works as well as ``--store sqlite:////data/at.db``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL"
DEFAULT_AIRFLOW_FILE = "airflow_transfer.db"
DEFAULT_USER_DIR = "~/.airflow-transfer"
DEFAULT_USER_FILE = "store.db"

MASK = "***"

# scheme://user:password@host...  The password runs to the first '@' that is
# followed by a plausible host (no further '@' before the path), so unencoded
# '@', '/', ':' or '?' in a password are masked too (SQLAlchemy's parser
# accepts some of those). The price: "sftp://host:22/a@b/c" is ambiguous (a
# port and an '@' in the path, or user "host" with password "22/a") and is
# masked as if it held a password. Over-masking a rare display string beats
# leaking a password.
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][\w+.-]*://[^:/@?#]*):(?P<password>.*?)@(?=[^@/?#]*(?:[/?#]|$))")
# name=value pairs in a query string whose name says they are secret
_SECRET_PARAM = re.compile(r"(?P<name>[?&;][^=&;#]*(?:pass|pwd|secret|token)[^=&;#]*)=(?P<value>[^&;#]*)", re.I)


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """The SQLite file used when nothing is configured (its directory is created)."""
    env = os.environ if environ is None else environ
    airflow_home = env.get("AIRFLOW_HOME", "").strip()
    if airflow_home:
        directory = Path(airflow_home).expanduser()
        name = DEFAULT_AIRFLOW_FILE
    else:
        directory = Path(env.get("HOME") or Path.home()) / DEFAULT_USER_DIR.removeprefix("~/")
        name = DEFAULT_USER_FILE
    directory.mkdir(parents=True, exist_ok=True)
    return directory.resolve() / name


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """SQLAlchemy URL of a SQLite file (absolute: the working directory of a worker is not ours)."""
    return "sqlite:///" + str(Path(path).expanduser().resolve())


def resolve_store_url(url: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The store URL to use: explicit argument > environment > default SQLite file."""
    env = os.environ if environ is None else environ
    for candidate in (url, env.get(ENV_VAR)):
        if candidate is not None and candidate.strip():
            return normalize_url(candidate.strip())
    return sqlite_url(default_store_path(env))


def normalize_url(url: str) -> str:
    """Accept the spellings people paste: a bare file path, ``postgres://`` (Heroku style)."""
    if "://" not in url:
        return sqlite_url(url)
    if url.startswith("postgres://"):
        return "postgresql://" + url[len("postgres://") :]
    return url


def mask_url(url: str) -> str:
    """``url`` with any password (userinfo or secret-looking query value) replaced by ``***``.

    Safe for logs, error messages and the store's own src/dst columns. Works for
    any ``scheme://`` URL, not only SQLAlchemy ones.
    """
    masked = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", url, count=1)
    return _SECRET_PARAM.sub(lambda m: f"{m['name']}={MASK}", masked)
