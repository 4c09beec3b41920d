"""Profiling DAGs: the Stork profilers and tuner of paper 003 Fig. 4.1, writing the tuning library.

airflow_transfer_profile (run it once, and again when hosts change):
    disk, memory and kernel profiles mapped over hosts; the network profile
    mapped over ordered host pairs; then the tuner per ordered pair.
airflow_transfer_profile_light (every `tick`, default 15 minutes):
    per ordered pair, the light network profile and the tuner -- only when the
    pair is due. After k results in a row within +-10 % of the previous one the
    pair's interval doubles (up to a maximum); a result that moves resets it.
    The back-off state lives in the store (at_light_schedule); a pair that is
    not due is skipped.

Hosts: "local" (this worker) or Airflow ssh/sftp connection ids ("conn:/dir"
picks the disk profiler's directory). Pairs come from the `pairs` param or the
Variable airflow_transfer_profile_pairs, e.g. [["local", "hpc_sftp:/scratch"]].
Every transfer between profiled hosts then starts from the library
(summary: tuning.source = "library (measured ...)"). docs/profilers.md.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, Variable, task

TICK = timedelta(minutes=15)

COMMON_PARAMS = {
    "pairs": Param([], type="array", description="host pairs; empty: the Variable airflow_transfer_profile_pairs"),
    "protocols": Param(["sftp"], type="array", description="protocols to tune for"),
    "via": Param("direct", enum=["direct", "ssh"], description="how the bandwidth probe reaches a remote sink"),
    "quick": Param(False, type="boolean", description="small profiler budgets (a few seconds each)"),
}
LIGHT_PARAMS = {
    **COMMON_PARAMS,
    "k": Param(3, type="integer", minimum=1, description="stable results in a row before the interval doubles"),
    "base_interval_minutes": Param(60, type="number", exclusiveMinimum=0),
    "max_interval_minutes": Param(7 * 24 * 60, type="number", exclusiveMinimum=0),
}


def _pairs(params) -> list:
    from airflow_transfer.profiling.plan import VARIABLE, parse_pairs

    value = params.get("pairs") or Variable.get(VARIABLE, default="[]")
    return parse_pairs(value)


def _runner(spec: str):
    """A HostRunner for "local" or a connection id (credentials only from the connection)."""
    from airflow_transfer.hooks.endpoint import TransferEndpointHook
    from airflow_transfer.profiling.hosts import LOCALHOST, ProfileHost, from_endpoint
    from airflow_transfer.profiling.plan import LOCAL_SPECS, split_spec
    from airflow_transfer.profiling.remote import HostRunner

    name, path = split_spec(spec)
    if name in LOCAL_SPECS:
        return HostRunner(ProfileHost(LOCALHOST, None, path))
    return HostRunner(from_endpoint(TransferEndpointHook(name).endpoint(path or ".")))


def _store():
    from airflow_transfer.airflow_conf import store_url
    from airflow_transfer.store import Store

    return Store.open(store_url())


def _log(line: str) -> None:
    print(line, flush=True)  # the task log


@task
def hosts_to_profile(params=None) -> list[str]:
    from airflow_transfer.profiling.plan import hosts_of

    return hosts_of(_pairs(params))


@task
def pairs_to_profile(params=None) -> list[list[str]]:
    from airflow_transfer.profiling.plan import ordered_pairs

    return ordered_pairs(_pairs(params))


def _host_task(kind: str):
    @task(task_id=f"{kind}_profile")
    def run(host: str, params=None) -> dict:
        from airflow_transfer.profiling.library import profile_host

        with _store() as store, _runner(host) as runner:
            return profile_host(store, runner, kinds=(kind,), quick=params["quick"], progress=_log)[kind]

    return run


# One measurement at a time: two probes sharing a link would each see half of it.
@task(max_active_tis_per_dag=1)
def network_profile(pair: list[str], params=None) -> dict:
    from airflow_transfer.profiling.library import profile_link

    with _store() as store, _runner(pair[0]) as src, _runner(pair[1]) as dst:
        return profile_link(store, src, dst, via=params["via"], quick=params["quick"], progress=_log)


@task
def tune(pair: list[str], params=None) -> list[dict]:
    from airflow_transfer.profiling.library import tune_link

    with _store() as store, _runner(pair[0]) as src, _runner(pair[1]) as dst:  # keys only: nothing connects
        rows = tune_link(store, src.host.key, dst.host.key, protocols=tuple(params["protocols"]))
    for row in rows:
        _log(
            f"tuned {row['source']} -> {row['destination']} ({row['protocol']}): streams {row['streams']}, "
            f"TCP buffer {row['tcp_buffer']}, block {row['block_size']}, BDP {row['bdp_bytes']}"
        )
    return [{k: v for k, v in row.items() if k != "reasons"} for row in rows]


@task(max_active_tis_per_dag=1)
def light_profile(pair: list[str], params=None) -> dict:
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_transfer.profiling.library import light_run

    with _store() as store, _runner(pair[0]) as src, _runner(pair[1]) as dst:
        schedule = store.light_schedule(src.host.key, dst.host.key)
        if not store.light_due(src.host.key, dst.host.key):
            raise AirflowSkipException(
                f"{src.host.key} -> {dst.host.key} is not due until "
                f"{schedule['next_due_at']} (interval {schedule['interval_s']:g} s)"
            )
        step = light_run(
            store,
            src,
            dst,
            protocols=tuple(params["protocols"]),
            via=params["via"],
            quick=params["quick"],
            k=int(params["k"]),
            base_interval_s=float(params["base_interval_minutes"]) * 60,
            max_interval_s=float(params["max_interval_minutes"]) * 60,
            progress=_log,
        )
    return {"profile": step["profile"], "schedule": step["schedule"]}


with DAG(
    dag_id="airflow_transfer_profile",
    schedule=None,
    catchup=False,
    params=COMMON_PARAMS,
    tags=["airflow-transfer", "profiling"],
    doc_md=__doc__,
) as profile_dag:
    hosts = hosts_to_profile()
    pairs = pairs_to_profile()
    host_profiles = [_host_task(kind).expand(host=hosts) for kind in ("disk", "memory", "kernel")]
    networks = network_profile.expand(pair=pairs)
    tuned = tune.expand(pair=pairs)
    host_profiles >> tuned
    networks >> tuned

with DAG(
    dag_id="airflow_transfer_profile_light",
    schedule=TICK,
    catchup=False,
    max_active_runs=1,
    params=LIGHT_PARAMS,
    tags=["airflow-transfer", "profiling"],
    doc_md=__doc__,
) as light_dag:
    light_profile.expand(pair=pairs_to_profile())
