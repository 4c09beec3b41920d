"""Dataset names of a transfer's ends, shared by OpenLineage and Airflow Assets (docs/lineage.md).

OpenLineage splits a dataset into a namespace (``scheme://authority``, the data source) and a name
(the path inside it); joined back together they are the URI an Airflow Asset carries, so lineage
and Asset events name the same directory the same way. The conventions follow the OpenLineage
naming spec and the Airflow providers' translations:

    local      namespace ``file``                  name ``/abs/path``   URI ``file:///abs/path``
    sftp       namespace ``sftp://host:port``      name ``/path``       URI ``sftp://host:port/path``
    s3 / gs    namespace ``s3://bucket``           name ``key``         URI ``s3://bucket/key``
    others     namespace ``scheme://host[:port]``  name ``/path``

The user never appears: two logins to one server see the same files. No Airflow imports here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .endpoint import Endpoint, parse_url

# fsspec schemes whose first path segment is a bucket (the namespace), under the spec's scheme name
_BUCKETS = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "abfs": "abfs", "az": "abfs"}
_DEFAULT_PORTS = {"sftp": 22, "ftp": 21, "http": 80, "https": 443}


@dataclass(frozen=True)
class DatasetName:
    """One end of a transfer as OpenLineage and Airflow Assets name it."""

    namespace: str
    name: str

    @property
    def uri(self) -> str:
        """The Asset URI: namespace and name joined (``file:///a/b``, ``sftp://h:22/a/b``, ``s3://b/k``)."""
        if "://" not in self.namespace:  # file, and fsspec schemes without a host (memory)
            return f"{self.namespace}://{self.name}"
        if self.name.startswith("/"):
            return self.namespace + self.name
        return f"{self.namespace}/{self.name}"


def _host_port(host: str, port: int | None, scheme: str) -> str:
    host = f"[{host}]" if ":" in host else host  # an IPv6 literal
    port = port or _DEFAULT_PORTS.get(scheme)
    return f"{host}:{port}" if port else host


def _clean(path: str) -> str:
    """One slash between segments and none at the end, so ``/a/b/`` and ``/a//b`` name one dataset."""
    parts = [p for p in path.split("/") if p]
    return ("/" if path.startswith("/") else "") + "/".join(parts) or "."


def dataset_names(endpoint: Endpoint) -> list[DatasetName]:
    """The datasets an endpoint reads or writes: one, or one per replica of a replica set."""
    if endpoint.scheme == "replicas" and endpoint.options is not None:
        return [n for replica in endpoint.options["set"].replicas for n in dataset_names(replica)]
    return [dataset_name(endpoint)]


def dataset_name(endpoint: Endpoint) -> DatasetName:
    """Namespace and name of one endpoint (see the module's table)."""
    scheme, path = endpoint.scheme, endpoint.path
    if scheme == "file":
        return DatasetName("file", _clean(path))
    if scheme == "sftp" and endpoint.target is not None:
        return DatasetName(f"sftp://{_host_port(endpoint.target.host, endpoint.target.port, scheme)}", _clean(path))
    if scheme in _BUCKETS:
        bucket, _, key = path.strip("/").partition("/")
        return DatasetName(f"{_BUCKETS[scheme]}://{bucket}", _clean(key) if key else "/")
    if endpoint.host:
        return DatasetName(f"{scheme}://{_host_port(endpoint.host, endpoint.port, scheme)}", _clean(path))
    return DatasetName(scheme, _clean(path))


def url_dataset_name(url: str) -> DatasetName:
    """The same for a URL or plain path as written in a DAG, without resolving any connection."""
    parsed = parse_url(url)
    if parsed.scheme == "sftp":
        return DatasetName(f"sftp://{_host_port(parsed.host or '', parsed.port, 'sftp')}", _clean(parsed.path))
    return dataset_name(Endpoint(parsed.scheme, parsed.path, host=parsed.host, port=parsed.port))
