"""What a copy's start loads: modules a copy over SFTP to a SQLite store never uses stay out.

Each costs every copy its import time before the first byte moves (docs/transfers.md, "Start
and exit"); this checks, in a fresh interpreter, that the modules a copy imports (the CLI,
the job, the SFTP backend, a SQLite store opened and closed) leave them unloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_AT_START = (
    "invoke.collection",  # paramiko's `Match exec` helper, loaded on first use (protocols/paramiko_lib.py)
    "yaml",  # invoke's
    "unittest",  # invoke's
    "sqlalchemy.dialects.postgresql",  # the store is SQLite here
    "ftplib",  # the FTP backend
    "pyarrow.parquet",  # manifest files
    "http.client",  # the HTTP backend
)

_CODE = """
import json, sys
import airflow_transfer.cli, airflow_transfer.job
from airflow_transfer.protocols.backends import sftp
from airflow_transfer.store import Store
Store.open(sys.argv[1]).close()
print(json.dumps({"loaded": sorted(sys.modules), "paramiko": "paramiko.transport" in sys.modules}))
"""


def test_a_copys_start_leaves_unused_modules_unloaded(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _CODE, f"sqlite:///{tmp_path}/store.db"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    seen = json.loads(out)
    assert seen["paramiko"], "the check must run with paramiko loaded, as a copy has it"
    loaded = set(seen["loaded"])
    assert [m for m in NOT_AT_START if m in loaded] == []
    assert "sqlalchemy" in loaded and "pyarrow" in loaded  # what a copy does need is there


_PAUSE = """
import gc, json, sys
from airflow_transfer import cli_start
if sys.argv[1] == "program":
    cli_start.program_started()
if sys.argv[2] == "paused-before":
    gc.disable()
with cli_start.collector_paused():
    inside = gc.isenabled()
    import airflow_transfer.job
print(json.dumps({"inside": inside, "after": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


def _paused(*argv: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PAUSE, *argv], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_collector_pauses_for_the_imports_and_only_the_program_freezes_them():
    program = _paused("program", "enabled")
    assert program["inside"] is False and program["after"] is True
    assert program["frozen"] > 100_000  # the imported modules' objects, out of every later collection
    library = _paused("library", "enabled")  # a process calling cli.main itself keeps its collector as it was
    assert library["inside"] is False and library["after"] is True and library["frozen"] == 0
    paused = _paused("program", "paused-before")  # a collector the caller paused stays paused
    assert paused["inside"] is False and paused["after"] is False and paused["frozen"] == 0


_RESOLVE = """
import json, sys
from airflow_transfer.protocols.ssh_config import from_ssh_config
target = from_ssh_config("127.0.0.1", 2222, "someone", known_hosts=sys.argv[1])
print(json.dumps({"port": target.port, "user": target.username, "paramiko": "paramiko" in sys.modules}))
"""


def test_a_host_resolves_without_paramiko_where_no_ssh_config_exists(tmp_path):
    # The command line starts its `ssh` helpers right after resolving the host: without a config
    # file to parse, paramiko's import (0.05-0.1 s) waits until they are on their way.
    home = tmp_path / "home"
    home.mkdir()
    argv = [sys.executable, "-c", _RESOLVE, str(tmp_path / "known_hosts")]
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    seen = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout)
    assert seen == {"port": 2222, "user": "someone", "paramiko": False}
    (home / ".ssh").mkdir()
    (home / ".ssh" / "config").write_text("# nothing here yet\n\n   \n")  # comments only: nothing to parse
    seen = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout)
    assert seen == {"port": 2222, "user": "someone", "paramiko": False}
    (home / ".ssh" / "config").write_text("Host 127.0.0.1\n  User fromconfig\n  Port 2022\n")
    argv[2] = _RESOLVE.replace('2222, "someone"', "None, None")
    seen = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout)
    assert seen == {"port": 2022, "user": "fromconfig", "paramiko": True}  # a file there is read, as before
