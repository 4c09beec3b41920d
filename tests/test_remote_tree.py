"""Creating a destination tree over SFTP (engine/remote_tree.py) against a real sshd."""

from __future__ import annotations

import pytest

from airflow_transfer.engine.remote_tree import make_dirs
from airflow_transfer.errors import TransferError
from airflow_transfer.protocols import sftp_wire as w
from airflow_transfer.protocols.pool import SFTPPool


def test_a_re_run_into_an_existing_tree_checks_its_directories_pipelined(sshd, remote_dir, monkeypatch):
    """Every MKDIR of an existing directory fails; the STATs that tell "exists" from "cannot be
    made" go out together, not one round trip each (300 directories: 15 s at 50 ms)."""
    todo = [str(remote_dir / f"d{i:03d}") for i in range(300)]
    pool = SFTPPool(sshd.target(look_for_keys=False))
    try:
        assert make_dirs(pool, todo, "test") == set(todo)  # all new: every one created
        events: list[str] = []
        send, pump = w.SFTPWire.send, w.SFTPWire.pump

        def logged_send(self, ptype, *args, **kw):
            events.append("S" if ptype == w.STAT else "o")
            return send(self, ptype, *args, **kw)

        def logged_pump(self, *args, **kw):
            events.append("P")
            return pump(self, *args, **kw)

        monkeypatch.setattr(w.SFTPWire, "send", logged_send)
        monkeypatch.setattr(w.SFTPWire, "pump", logged_pump)
        assert make_dirs(pool, todo, "test") == set()  # all there: none created, no error
        assert events.count("S") == 300 and "S" * 200 in "".join(events), "".join(events)[:400]
    finally:
        pool.close()


def test_a_directory_that_cannot_be_made_is_a_clear_error(sshd, remote_dir):
    (remote_dir / "plain").write_bytes(b"a file where a directory should be")
    pool = SFTPPool(sshd.target(look_for_keys=False))
    try:
        with pytest.raises(TransferError, match="cannot create destination directory") as info:
            make_dirs(pool, [str(remote_dir / "ok"), str(remote_dir / "plain")], "test")
        assert "plain" in str(info.value)
    finally:
        pool.close()
