"""Why slurmctld refused a gang, in the platform's words: a distributed Job is one
allocation of `nodes` nodes with one rank on each, and a partition with fewer nodes (or
a per-job node limit below it) can never run it. slurmctld says only "Requested node
configuration is not available"; the Job fails with CapacityUnavailable, how many
nodes it needs against how many its partitions have, and what to change."""

from __future__ import annotations

from typing import Any

from nodus_gitops.providers.local.spec import JobSpec


def _is_default(part: dict[str, Any]) -> bool:
    flags = part.get("flags") or (part.get("partition") or {}).get("state") or []
    return any(str(f).lower() == "default" for f in flags)


def _node_count(part: dict[str, Any]) -> int:
    """Its nodes, held to its per-job node limit where it has one."""
    total = part.get("total_nodes")
    if total is None:  # newer slurmrestd: {"nodes": {"total": N, ...}}
        nodes = part.get("nodes")
        total = nodes.get("total") if isinstance(nodes, dict) else 0
    limit = part.get("maximum_nodes_per_job")
    if isinstance(limit, dict):  # newer slurmrestd: {"set": bool, "number": N}
        limit = limit.get("number") if limit.get("set") else None
    total = int(total or 0)
    return min(total, int(limit)) if isinstance(limit, int) and 0 < limit < total else total


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def refusal(spec: JobSpec, partition: str | None,
            partitions: list[dict[str, Any]]) -> tuple[str, str]:
    """(message, fix) for a gang slurmctld refused; `partition` is the comma list the
    Job was submitted to (None: the cluster's default partition)."""
    nodes = spec.members
    fix = ("lower spec.distributed.nodes (or gpusPerNode), or run the Job on a cluster "
           f"with at least {nodes} such nodes")
    what = spec.gpu.describe() if spec.gpu else "CPU only"
    names = partition.split(",") if partition else [
        str(p.get("name")) for p in partitions if _is_default(p)]
    counts = {str(p.get("name")): _node_count(p) for p in partitions
              if str(p.get("name")) in names}
    wanted = f"the gang needs {nodes} nodes at once (one rank on each, {what})"
    if counts and max(counts.values()) < nodes:
        if len(counts) == 1:
            [(name, count)] = counts.items()
            return f"{wanted}; partition {name} has {_plural(count, 'node')}", fix
        return (f"{wanted}; partitions {', '.join(counts)} have at most "
                f"{_plural(max(counts.values()), 'node')}"), fix
    where = f"partition {', '.join(names)}" if names else "the cluster"
    return f"{wanted}; {where} cannot give {nodes} nodes that each fit one rank", fix
