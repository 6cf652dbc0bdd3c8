"""What differs between runs: the recorded provenance flattened to keys, plus what each run's
ranks reported, so a report and a history can say which versions or variables changed."""
from __future__ import annotations

import hashlib


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif v is not None:   # None means "not on this machine": the same as a run that never recorded the key
            out[key] = brief(str(v))
    return out


def brief(text: str) -> str:
    """A value as a diff shows it: a multi-line one (a topology matrix) as its size and a digest, so
    two runs' topologies compare in one short line."""
    if "\n" not in text:
        return text
    return f"{len(text.splitlines())} lines, sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}"


def provenance_diff(provs: list[dict]) -> list[tuple[str, list[str]]]:
    """Keys whose value differs between runs (versions, environment, commit...)."""
    flat = [flatten(p) for p in provs]
    keys = sorted(set().union(*flat)) if flat else []
    return [(k, [f.get(k, "-") for f in flat]) for k in keys
            if len({f.get(k, "-") for f in flat}) > 1 and not k.startswith(("command", "driver_host"))]


def run_provenance(run) -> dict:
    """The session's provenance plus what its ranks ran with (`rank_env`), the versions its own groups
    reported (`ranks`) and the adapter variables its ranks saw (`rank_vars`): where two A/B sides differ."""
    rank_env: dict[str, set] = {}
    envs = set()
    for cell in run.cells.values():
        envs.add(tuple(sorted(cell.row.group_env.items())))
        for k, v in cell.row.group_env.items():
            rank_env.setdefault(k, set()).add("(unset)" if v is None else str(v))
    seen: dict[str, dict[str, set]] = {"versions": {}, "adapter_env": {}}
    for group in run.meta.groups.values():
        if group.get("side", "") != run.side:
            continue   # the other side's groups: both sides' env can be empty (another interpreter only)
        if tuple(sorted((group.get("env") or {}).items())) in envs:
            for what, values in seen.items():
                for k, v in (group.get(what) or {}).items():
                    values.setdefault(k, set()).add(str(v))
    joined = {what: {k: " | ".join(sorted(v)) for k, v in values.items()} for what, values in seen.items()}
    return {**run.meta.provenance, "rank_env": {k: " | ".join(sorted(v)) for k, v in rank_env.items()},
            "ranks": joined["versions"], "rank_vars": joined["adapter_env"]}
