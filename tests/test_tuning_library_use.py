"""Transfers start from the tuning library: `tuning.source` says library / measured now / given."""

from __future__ import annotations

import pytest

from airflow_transfer.store import Store
from tests.support.cli import run_cli, ssh_args


@pytest.fixture
def store_env(tmp_path):
    url = f"sqlite:///{tmp_path / 'library.db'}"
    return url, {"AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": url}


def _dataset(local_dir, n=6, size=200_000):
    for i in range(n):
        (local_dir / f"f{i}.bin").write_bytes(bytes([i]) * size)


def test_copy_after_profile_uses_the_library_and_given_figures_win(sshd, remote_dir, local_dir, store_env):
    url, env = store_env
    res = run_cli("profile", sshd.url(str(remote_dir)), "--quick", "--json", *ssh_args(sshd), env=env)
    assert res.code == 0, res.err
    far = f"{sshd.host}:{sshd.port}"
    with Store.open(url) as store:
        row = store.tuned_for("localhost", far, "sftp")
    _dataset(local_dir)

    for algorithm in ("auto", "fixed"):
        res = run_cli(
            "copy",
            str(local_dir),
            sshd.url(f"{remote_dir}/{algorithm}"),
            "--algorithm",
            algorithm,
            "--json",
            *ssh_args(sshd),
            env=env,
        )
        assert res.code == 0, res.err
        tuning = res.summary["tuning"]
        assert tuning["source"] == f"library (measured {row['measured_at']})"
        assert tuning["library_id"] == row["id"]
        assert tuning["rtt_ms"] == pytest.approx(row["rtt_ms"], abs=1e-3)
        assert tuning["bandwidth_mbit"] == pytest.approx(row["bandwidth_mbit"], abs=0.01)
        assert tuning["bdp_bytes"] == pytest.approx(row["bdp_bytes"], rel=1e-3, abs=2)
        assert (tuning["streams"], tuning["tcp_buffer"], tuning["block_size"]) == (
            row["streams"],
            row["tcp_buffer"],
            row["block_size"],
        )
        assert res.summary["files"] == 6 and not res.summary["failed"]

    res = run_cli(
        "copy",
        str(local_dir),
        sshd.url(f"{remote_dir}/given"),
        "--algorithm",
        "auto",
        "--rtt-ms",
        "80",
        "--bandwidth-mbit",
        "100",
        "--json",
        *ssh_args(sshd),
        env=env,
    )
    assert res.code == 0, res.err
    tuning = res.summary["tuning"]
    assert tuning["source"] == "given" and tuning["rtt_ms"] == 80.0 and tuning["bandwidth_mbit"] == 100.0
    assert "library_id" not in tuning

    # the other direction (a download) has its own library row
    res = run_cli(
        "copy",
        sshd.url(f"{remote_dir}/auto"),
        str(local_dir / "back"),
        "--algorithm",
        "auto",
        "--json",
        *ssh_args(sshd),
        env=env,
    )
    assert res.code == 0, res.err
    with Store.open(url) as store:
        back = store.tuned_for(far, "localhost", "sftp")
    assert res.summary["tuning"]["library_id"] == back["id"] != row["id"]


def test_measure_link_when_the_library_is_empty(sshd, remote_dir, local_dir, store_env):
    url, env = store_env
    _dataset(local_dir, n=2)
    # pcp, not auto: auto's first contact would fill the library itself (tests/test_first_contact.py)
    res = run_cli(
        "copy", str(local_dir), sshd.url(str(remote_dir)), "--algorithm", "pcp", "--json", *ssh_args(sshd), env=env
    )
    assert res.code == 0, res.err
    assert res.summary["tuning"]["source"] == "unknown (adapting by measurement)"

    res = run_cli(
        "copy",
        str(local_dir),
        sshd.url(f"{remote_dir}/2"),
        "--algorithm",
        "auto",
        "--measure-link",
        "--json",
        *ssh_args(sshd),
        env=env,
    )
    assert res.code == 0, res.err
    tuning = res.summary["tuning"]
    assert tuning["source"] == "measured now" and tuning["bdp_bytes"] > 0 and tuning["rtt_ms"] > 0
    with Store.open(url) as store:
        row = store.tuned_for("localhost", f"{sshd.host}:{sshd.port}", "sftp")
        assert row is not None and row["id"] == tuning["library_id"]
        assert store.latest_profile("localhost", "network-light", peer=f"{sshd.host}:{sshd.port}") is not None

    # the next transfer finds it in the library
    res = run_cli(
        "copy", str(local_dir), sshd.url(f"{remote_dir}/3"), "--algorithm", "auto", "--json", *ssh_args(sshd), env=env
    )
    assert res.summary["tuning"]["source"].startswith("library (measured ")


def test_should_measure_decides_by_algorithm_and_size():
    from airflow_transfer.tuning.library import AUTO_MEASURE_BYTES, should_measure

    assert should_measure(True, "fixed", 0)[0] is True  # asked for wins
    assert should_measure(False, "auto", 10 * AUTO_MEASURE_BYTES)[0] is False  # turned off wins
    assert should_measure(None, "fixed", 10 * AUTO_MEASURE_BYTES) == (False, "fixed parameters need no link figures")
    small, why = should_measure(None, "pcp", AUTO_MEASURE_BYTES - 1)
    assert small is False and "adapting by measurement" in why
    first, why = should_measure(None, "auto", 10 * AUTO_MEASURE_BYTES)
    assert first is False and "first contact" in why  # auto learns the link from the copy itself
    big, why = should_measure(None, "pcp", AUTO_MEASURE_BYTES)
    assert big is True and "kept in the tuning library" in why


def test_a_large_adaptive_transfer_measures_an_unknown_link_by_itself(
    sshd, remote_dir, local_dir, store_env, monkeypatch
):
    """No --measure-link: a model-based algorithm over the threshold profiles the link once, and says why
    (auto does not: its first contact learns the link from the copy, tests/test_first_contact.py)."""
    from airflow_transfer.job import CopyRequest, run_copy
    from airflow_transfer.protocols.endpoint import Endpoint
    from airflow_transfer.protocols.ssh import SSHTarget
    from airflow_transfer.tuning import library

    url, _env = store_env
    _dataset(local_dir, n=3)
    monkeypatch.setattr(library, "AUTO_MEASURE_BYTES", 500_000)  # the 600 kB dataset is "large" here
    target = SSHTarget(
        host=sshd.host,
        port=sshd.port,
        username=sshd.user,
        key_filenames=[str(sshd.client_key)],
        known_hosts=[str(sshd.known_hosts)],
    )
    lines: list[str] = []

    def copy(sub: str, **kw) -> dict:
        return run_copy(
            CopyRequest(
                Endpoint("file", str(local_dir)),
                Endpoint("sftp", f"{remote_dir}/{sub}", target),
                algorithm="pcp",
                store_url=url,
                log=lines.append,
                **kw,
            )
        )

    off = copy("off", measure_link=False)
    assert off["tuning"]["source"] == "unknown (adapting by measurement)"
    assert any("turned off" in n for n in off["tuning"]["notes"]), off["tuning"]
    summary = copy("auto")
    assert summary["tuning"]["source"] == "measured now" and summary["tuning"]["bdp_bytes"] > 0, summary["tuning"]
    assert any("measuring once" in line for line in lines), lines
    again = copy("again")  # the library has it now: no second probe
    assert again["tuning"]["source"].startswith("library (measured "), again["tuning"]
    assert not again["failed"] and again["files"] == 3
