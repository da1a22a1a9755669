"""The rules of `capacity_manager: karpenter` and `teams:` (models in `training_elastic.py`): every problem one line,
reported with the other training rules (`training_rules.training_problems`).

Apart from the models so `training.py` imports them without an import circle (the rules read `TrainingConfig`).
"""

from __future__ import annotations

from mlstack.catalog import get_instance
from mlstack.config.training import NodeGroupConfig, TrainingConfig
from mlstack.config.training_elastic import PoolConfig
from mlstack.config.training_hyperpod_rules import autoscaling_problems, group_nodes, team_problems


def group_capacity_types(group: NodeGroupConfig) -> list[str]:
    """The Karpenter capacity types of a node group's capacity: an ODCR or Capacity Block is `reserved`."""
    return {"on_demand": ["on-demand"], "spot": ["spot"]}.get(group.capacity.type, ["reserved"])


def _pool_problems(training: TrainingConfig, group: NodeGroupConfig, pool: PoolConfig | None) -> list[str]:
    where = f"training.karpenter.pools[{group.name}]"
    types = [group.instance, *(get_instance(t) for t in (pool.extra_instance_types if pool else []))]
    kinds = pool.capacity_types if pool and pool.capacity_types is not None else group_capacity_types(group)
    problems: list[str] = []
    if group.efa:
        missing = [t.name for t in types if not t.efa_supported]
        if missing:
            problems.append(
                f"{where}.extra_instance_types: {', '.join(missing)} without EFA in the EFA pool of "
                f"{group.instance_type}: a job's pods request every EFA device, so such a node never fits; list only "
                "EFA-capable types (or set efa: false on the group)"
            )
    if group.capacity.type == "capacity_block" and kinds != ["reserved"]:
        problems.append(
            f"{where}.capacity_types: {kinds} for a Capacity Block pool; Capacity Block instances launch only as "
            "capacity type reserved: use [reserved]"
        )
    if group.efa and "spot" in kinds and group.max_size > 1:
        problems.append(
            f"{where}.capacity_types: spot in a multi-node EFA pool (max_size {group.max_size}): one interruption "
            "stops the whole job; use on-demand or reserved, or max_size: 1"
        )
    if "reserved" in kinds and not group.capacity.is_reservation:
        problems.append(
            f"{where}.capacity_types: reserved needs the group's capacity.type capacity_reservation or capacity_block "
            "with its reservation_id (the pool selects that reservation); add it or drop reserved"
        )
    if training.capacity_manager == "karpenter" and (group.desired_size or group.min_size):
        problems.append(
            f"node group {group.name!r}: desired_size/min_size are node-group sizes; a Karpenter pool starts empty and "
            "launches nodes for pending jobs (max_size stays its limit): set desired_size and min_size to 0"
        )
    return problems


def elastic_problems(training: TrainingConfig) -> list[str]:
    """One line per problem of `capacity_manager`, `karpenter` and `teams` (empty when fine)."""
    problems: list[str] = []
    groups = {g.name: g for g in training.node_groups}
    names = ", ".join(groups)
    karpenter = training.karpenter
    if karpenter is not None and training.capacity_manager != "karpenter":
        problems.append("training.karpenter: set only with capacity_manager: karpenter; add it or remove karpenter")
    if training.capacity_manager == "karpenter" and training.engine not in ("eks", "hyperpod-eks"):
        problems.append(
            f"training.capacity_manager: karpenter runs on engines eks and hyperpod-eks, not {training.engine}; use "
            "node_groups"
        )
    pools = {p.node_group: p for p in (karpenter.pools if karpenter else [])}
    for name in pools:
        if name not in groups:
            problems.append(f"training.karpenter.pools: {name!r} is not a node group; use one of {names}")
    if training.capacity_manager == "karpenter" and training.engine == "eks":
        for group in training.node_groups:
            problems += _pool_problems(training, group, pools.get(group.name))
    if training.capacity_manager == "karpenter" and training.engine == "hyperpod-eks":
        problems += [p for g in training.node_groups for p in _start_empty(g)]
    problems += autoscaling_problems(training)
    problems += _team_problems(training)
    problems += team_problems(training)
    return problems


def _start_empty(group: NodeGroupConfig) -> list[str]:
    if not (group.desired_size or group.min_size):
        return []
    return [
        f"node group {group.name!r}: desired_size/min_size with capacity_manager karpenter; HyperPod autoscaling "
        "starts each instance group at 0 nodes and scales it down to 0 otherwise (max_size stays its limit): set "
        "desired_size and min_size to 0"
    ]


def pool_limit(group: NodeGroupConfig, nodes: int | None = None) -> int:
    """Accelerators a pool (or node group) may hold at most: max_size (or `nodes`) x accelerators per node."""
    accel = group.instance.accelerator
    return (group.max_size if nodes is None else nodes) * (accel.count if accel is not None else 0)


def _team_problems(training: TrainingConfig) -> list[str]:
    teams = training.teams
    groups = {g.name: g for g in training.node_groups}
    problems: list[str] = []
    if not teams:
        if training.job.team is not None:
            problems.append(
                f"training.job.team: {training.job.team!r} but the blueprint has no teams; add a teams: entry or "
                "remove job.team"
            )
        return problems
    if training.engine not in ("eks", "hyperpod-eks"):
        problems.append(
            f"training.teams: team queues run on engines eks (Kueue) and hyperpod-eks (HyperPod task governance), not "
            f"{training.engine}; remove teams"
        )
    team_names = [t.name for t in teams]
    for dupe in sorted({n for n in team_names if team_names.count(n) > 1}):
        problems.append(f"training.teams: {dupe!r} is listed twice; give each team its own name")
    nominal: dict[str, int] = {}
    for team in teams:
        for quota in team.quotas:
            group = groups.get(quota.node_group)
            if group is None:
                problems.append(
                    f"training.teams[{team.name}].quotas: {quota.node_group!r} is not a node group; use one of "
                    f"{', '.join(groups)}"
                )
                continue
            if group.instance.accelerator is None:
                problems.append(
                    f"training.teams[{team.name}].quotas: node group {group.name!r} ({group.instance_type}) has no "
                    "accelerators to share; quota accelerator groups only"
                )
                continue
            nodes = group_nodes(training, group)
            limit = pool_limit(group, nodes)
            if quota.accelerators > limit:
                size = "max_size" if nodes == group.max_size else "desired_size (the instance count)"
                per_node = group.instance.accelerator.count
                problems.append(
                    f"training.teams[{team.name}].quotas[{group.name}].accelerators: {quota.accelerators} is more "
                    f"than node group {group.name!r} can provide ({limit} = {size} {nodes} x {per_node}); lower it "
                    f"or raise {size.split()[0]}"
                )
            nominal[group.name] = nominal.get(group.name, 0) + quota.accelerators
    for name, total in sorted(nominal.items()) if training.engine == "eks" else ():
        limit = pool_limit(groups[name])
        if total > limit:
            problems.append(
                f"training.teams: nominal quotas on node group {name!r} add up to {total} accelerators but it can "
                f"provide {limit} (max_size x accelerators per node); lower the quotas or raise max_size"
            )
    if training.job.team is not None and training.job.team not in team_names:
        problems.append(f"training.job.team: {training.job.team!r} is not a team; use one of {', '.join(team_names)}")
    job_team = next((t for t in teams if t.name == (training.job.team or team_names[0])), None)
    if job_team is not None and training.job_group.name not in {q.node_group for q in job_team.quotas}:
        problems.append(
            f"training.job: team {job_team.name!r} has no quota on node group {training.job_group.name!r}, so its "
            "queue never admits the job; add a quota for that group or pick another job.team"
        )
    return problems


def elastic_zone_problems(training: TrainingConfig, zones: list[str]) -> list[str]:
    """Rules that need the network's zones: a pool's zones are the network's, and an EFA pool stays in one AZ."""
    if training.karpenter is None:
        return []
    problems: list[str] = []
    groups = {g.name: g for g in training.node_groups}
    for pool in training.karpenter.pools:
        group = groups.get(pool.node_group)
        if group is None or pool.availability_zones is None:
            continue
        for zone in pool.availability_zones:
            if zone not in zones:
                problems.append(
                    f"training.karpenter.pools[{group.name}].availability_zones: {zone!r} is not one of the "
                    f"network's zones ({', '.join(zones)}); use one of them"
                )
        if group.efa and len(set(pool.availability_zones)) > 1:
            problems.append(
                f"training.karpenter.pools[{group.name}].availability_zones: an EFA pool across "
                f"{len(set(pool.availability_zones))} AZs ({', '.join(pool.availability_zones)}); EFA traffic does not "
                "cross AZs or subnets: list one zone"
            )
    return problems


def pool_zones(training: TrainingConfig, group: NodeGroupConfig, zones: list[str]) -> list[str]:
    """The zones of the group's pool: the override's, else the group's."""
    pool = next(
        (p for p in (training.karpenter.pools if training.karpenter else []) if p.node_group == group.name), None
    )
    if pool is not None and pool.availability_zones is not None:
        return list(pool.availability_zones)
    return training.zones_of(group, zones)
