"""What differs between runs: the recorded provenance flattened to keys, plus what each run's
ranks reported, so a report and a history can say which versions or variables changed."""
from __future__ import annotations


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


def provenance_diff(provs: list[dict]) -> list[tuple[str, list[str]]]:
    """Keys whose value differs between runs (versions, environment, commit...)."""
    flat = [flatten(p) for p in provs]
    keys = sorted(set().union(*flat)) if flat else []
    return [(k, [f.get(k, "-") for f in flat]) for k in keys
            if len({f.get(k, "-") for f in flat}) > 1 and not k.startswith(("command", "driver_host"))]


def run_provenance(run) -> dict:
    """The session's provenance plus what its ranks ran with (algorithm and --ab-env variables) and
    the versions its own groups reported (interpreter, torch, MPI library, thread level): that is
    where the two sides of an --ab-env/--ab-source run differ."""
    rank_env: dict[str, set] = {}
    envs = set()
    for cell in run.cells.values():
        envs.add(tuple(sorted(cell.row.group_env.items())))
        for k, v in cell.row.group_env.items():
            rank_env.setdefault(k, set()).add(str(v))
    versions: dict[str, set] = {}
    for group in (run.meta.get("groups") or {}).values():
        if not isinstance(group, dict) or group.get("side", "") != run.side:
            continue   # the other side's groups: both sides' env can be empty (another interpreter only)
        if tuple(sorted((group.get("env") or {}).items())) in envs:
            for k, v in (group.get("versions") or {}).items():
                versions.setdefault(k, set()).add(str(v))
    return {**run.meta.get("provenance", {}), "rank_env": {k: " | ".join(sorted(v)) for k, v in rank_env.items()},
            "ranks": {k: " | ".join(sorted(v)) for k, v in versions.items()}}
