"""What the transfer operators tell lineage tools and Airflow's Assets (docs/lineage.md).

Both name a transfer's ends the same way (protocols/naming.py). OpenLineage gets the inputs and
outputs of each task with statistics facets, through the ``get_openlineage_facets_on_*`` methods
the OpenLineage provider's listener calls; the provider is optional, so its classes are imported
inside those methods only. Assets: an operator declares one outlet for its destination when it is
built, a fixed Asset when the destination is a literal URL or path, else an AssetAlias (templated,
or the host comes from a connection), and fills the Asset event's ``extra`` when the copy succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import Asset, AssetAlias

from ..errors import UsageError
from ..protocols.endpoint import Endpoint
from ..protocols.naming import DatasetName, dataset_names, url_dataset_name


@dataclass
class Ends:
    """The datasets one task read and wrote, and the figures of what it moved."""

    inputs: list[DatasetName] = field(default_factory=list)
    outputs: list[DatasetName] = field(default_factory=list)
    files: int | None = None
    bytes: int | None = None
    digest: str | None = None  # the manifest digest (a transfer) or the output's sha256 (a query)
    inputs_same_version: bool = True  # a copy: the source holds what the digest describes; a query: not
    read: tuple[int, int] | None = None  # (files, bytes) read at the source when not what was written
    rows: tuple[int, int] | None = None  # (rows read, rows written): a query

    @classmethod
    def of(cls, src: Endpoint | None, dst: Endpoint | None) -> Ends:
        return cls(dataset_names(src) if src else [], dataset_names(dst) if dst else [])


def destination_outlet(op: Any, dst: Any, dst_conn_id: Any, alias: str | None) -> Asset | AssetAlias:
    """The outlet an operator declares for its destination (called from ``__init__``).

    A literal URL or path without a connection names its Asset now; otherwise the name is known
    only when the task runs, so the task declares an alias and attaches the Asset to it then."""
    if isinstance(dst, str) and "{{" not in dst and not dst_conn_id and not alias:
        try:
            return Asset(url_dataset_name(dst).uri)
        except UsageError:
            pass  # execute reports the bad URL with its own words; an alias keeps the DAG loadable
    return AssetAlias(alias or f"airflow_transfer/{op.dag_id}/{op.task_id}")


def emit_destination_events(op: Any, context: Any, ends: Ends, extra: dict) -> None:
    """Fill the Asset event of each destination with `extra` (files, bytes, manifest digest, ...).

    An Asset the DAG already lists in ``outlets`` under the destination's URI gets the extra on
    its own event; the others go through the operator's alias, so one copy makes one event."""
    outlet = getattr(op, "asset_outlet", None)
    if outlet is None:
        return
    declared = {a.uri: a for a in op.outlets if isinstance(a, Asset)}
    for name in ends.outputs:
        if name.uri in declared:
            context["outlet_events"][declared[name.uri]].extra.update(extra)
        elif isinstance(outlet, AssetAlias):
            context["outlet_events"][outlet].add(Asset(name.uri), extra=extra)


def asset_extra(ends: Ends, **more: Any) -> dict:
    """The ``extra`` of a destination's Asset event: files, bytes, digest, the source URIs, `more`."""
    return {
        "files": ends.files,
        "bytes": ends.bytes,
        "manifest_digest": ends.digest,
        "source": [n.uri for n in ends.inputs],
        **more,
    }


def declare_destination(op: Any, emit_asset: bool, dst: Any, dst_conn_id: Any, alias: str | None) -> None:
    """``__init__``'s part: remember and declare the destination's outlet (none with emit_asset=False)."""
    op.asset_outlet = destination_outlet(op, dst, dst_conn_id, alias) if emit_asset else None
    if op.asset_outlet is not None and op.asset_outlet not in op.outlets:  # the DAG may list it already
        op.outlets.append(op.asset_outlet)


class LineageMixin:
    """``get_openlineage_facets_on_*`` for an operator that keeps its `Ends` in ``self.transfer_lineage``.

    Before the run (on start) the ends come from ``planned_ends``, resolved from the rendered
    fields; after it from what execute recorded, with the figures of the copy. It goes after
    BaseOperator among the bases: Airflow's metaclass reads the defaults of the ``__init__`` that
    follows an operator class in its MRO, and this class has none."""

    transfer_lineage: Ends | None = None

    def planned_ends(self) -> Ends:
        return Ends()

    def get_openlineage_facets_on_start(self) -> Any:
        return _operator_lineage(self.planned_ends())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return _operator_lineage(self.transfer_lineage or self.planned_ends())

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        ends = self.transfer_lineage or self.planned_ends()
        # a failed copy moved an unknown part of the dataset: name the ends, claim no figures
        return _operator_lineage(Ends(ends.inputs, ends.outputs, inputs_same_version=ends.inputs_same_version))


def _operator_lineage(ends: Ends) -> Any:
    """OperatorLineage of the ends: statistics facets (files, bytes) and the manifest digest as the
    dataset version, when the run recorded them."""
    # optional: the OpenLineage provider is an extra; only its listener calls this
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (
        dataset_version_dataset,
        input_statistics_input_dataset,
        output_statistics_output_dataset,
    )

    facets: dict[str, Any] = {}
    if ends.digest:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=ends.digest)
    counted = ends.files is not None
    read_files, read_bytes = ends.read or (ends.files, ends.bytes)
    rows_in, rows_out = ends.rows or (None, None)
    inputs = [
        InputDataset(
            n.namespace,
            n.name,
            facets=dict(facets) if ends.inputs_same_version else {},
            inputFacets={
                "inputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                    rowCount=rows_in, size=read_bytes, fileCount=read_files
                )
            }
            if counted
            else {},
        )
        for n in ends.inputs
    ]
    outputs = [
        OutputDataset(
            n.namespace,
            n.name,
            facets=dict(facets),
            outputFacets={
                "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                    rowCount=rows_out, size=ends.bytes, fileCount=ends.files
                )
            }
            if counted
            else {},
        )
        for n in ends.outputs
    ]
    return OperatorLineage(inputs=inputs, outputs=outputs)
