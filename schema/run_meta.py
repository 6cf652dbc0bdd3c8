"""What a result file says about its run beside its rows (`hccl_bench` in results.json), typed once
as the run loads and checked like the rows; None: not recorded (older files)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from schema.records import ResultError, column, load_fields

SCHEMA = "hccl-bench/1"     # written into every result file, checked when one is read


@dataclass(frozen=True)
class RunOptions:
    """The session's options a reader judges by (harness/options.Options, recorded whole)."""
    estimator: Optional[str] = column("text")          # --estimator: each launch's statistic
    min_effect: Optional[float] = column("real")       # --min-effect
    repeat: Optional[int] = column("whole")            # --repeat: with ab_until_decided, the launch budget
    ab_until_decided: bool = column("flag", False)
    previous_stack: Optional[str] = column("text")     # --previous-stack
    previous_differs: Optional[bool] = column("flag")  # ... and it was another stack than this one
    labels: dict = column("object", {})                # --label SIDE=NAME


@dataclass(frozen=True)
class Canary:
    """A night's canary (harness/session/canary.py measure/spanning): reports/canary.py and export read it."""
    version: Optional[int] = column("whole")           # what a night's figure is: levels start afresh when it changes
    workloads: dict = column("object", {})             # workload -> samples (s) and what one is, or its error


@dataclass(frozen=True)
class RunMeta:
    groups: dict = column("object", {})                # group -> hosts, devices, versions, env, side
    provenance: dict = column("object", {})            # versions, environment, commit (harness/provenance.py)
    options: Optional[RunOptions] = column("object")   # None: not a pytest session (an import, an older file)
    canary: Optional[Canary] = column("object")        # None: not measured (an A/B, an import, an older file)
    wall_s: Optional[float] = column("real")           # the session's wall-clock
    interrupted: Optional[str] = column("text")        # why it ended early
    failed: Optional[str] = column("text")             # an imported log's failure
    field_limits: Optional[str] = column("text")       # field data (NCCL Inspector): what it cannot show
    # the recorded side that is the baseline: "B" where a same-night A/B ran this stack as side A; None: A
    baseline_side: Optional[str] = column("text")
    complete: bool = column("flag", True)              # False: ended early or rebuilt from cases.jsonl
    label: Optional[str] = column("text")              # `import --label`, or a reader's name for the run (Run.name_as)
    labels: dict = column("object", {})                # a reader's `--label SIDE=NAME` (Run.name_as)
    failures: list = column("list", [])                # cases that failed, each with its error
    skipped: list = column("list", [])                 # cases skipped, each with its reason

    @classmethod
    def from_json(cls, data, where: str) -> RunMeta:
        """A file's `hccl_bench` object (None: a plain pytest-benchmark file), checked; ResultError
        names the file and the field."""
        data = data or {}
        if not isinstance(data, dict):
            raise ResultError(f"{where}: 'hccl_bench' must be an object")
        groups = data.get("groups", {})
        if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
            raise ResultError(f"{where}: hccl_bench.groups must be an object of objects (group -> hosts, devices, versions)")
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise ResultError(f"{where}: written in schema {str(schema)[:40]!r}; this hccl-bench reads {SCHEMA!r} "
                              "(use the hccl-bench that wrote it)")
        values = load_fields(cls, data, f"{where}: hccl_bench")
        if values.get("baseline_side") not in (None, "A", "B"):
            raise ResultError(f"{where}: hccl_bench.baseline_side must be \"A\" or \"B\", "
                              f"found {str(values['baseline_side'])[:12]}")
        for name, record in (("options", RunOptions), ("canary", Canary)):
            if name in values:
                values[name] = record(**load_fields(record, values[name], f"{where}: hccl_bench.{name}"))
        return cls(**values)

    @classmethod
    def of(cls, meta: dict) -> RunMeta:
        """A session's own metadata in memory (or a test's), checked as a file's would be."""
        return cls.from_json(meta, "run metadata")
