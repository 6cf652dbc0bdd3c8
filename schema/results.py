"""The result schema, written once: what a case row, a series, a cell and a run hold. Every writer
builds rows here (`to_json`), every reader checks them here (`from_json`); a row field declared with
`metric(...)` is found by the table, the compare JSON and the report alike."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Union

from schema.kwonly import keyword_dataclass
from schema.records import ResultError, column, load_fields
from schema.run_meta import SCHEMA, RunMeta
from schema.stats import RankView, median


class NoCells(ResultError):
    """A readable result file with nothing to compare (a night that failed whole, the other side's run)."""


# ---- fields: each carries the check that load applies to it ----

def metric(heading: str, fmt: str, better: str, where: tuple[str, ...], check: str = "amount",
           benches: tuple[str, ...] = (), scale: float = 1.0):
    """A measured quantity shown by name in `where` ("table", "compare", "report")."""
    return column(check, None, metric=Metric("", heading, fmt, better, where, benches, scale))


@dataclass(frozen=True)
class Metric:
    name: str          # the row field
    heading: str       # column heading in the table and the report
    fmt: str           # format spec of one value
    better: str        # "lower" or "higher": the worst value of a series is the one a reader needs
    where: tuple[str, ...]
    benches: tuple[str, ...] = ()   # the benches of the row type that measure it (empty: every one)
    scale: float = 1.0              # shown as value / scale (GFLOP/s of a FLOP/s field)

    def text(self, value) -> str:
        return "-" if value is None else format(value / self.scale if self.scale != 1 else value, self.fmt)

    @property
    def width(self) -> int:
        return max(8, len(self.heading))


def metrics(row_type: type, where: str, bench: str | None = None) -> list[Metric]:
    """The metrics of a row type shown in `where`, in field order; with `bench`, those it measures."""
    return [replace(m, name=f.name) for f in fields(row_type) if (m := f.metadata.get("metric")) is not None
            and where in m.where and (bench is None or not m.benches or bench in m.benches)]


def _copied(value):
    if isinstance(value, list):
        return [list(v) if isinstance(v, list) else v for v in value]
    if isinstance(value, dict):
        return {k: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v for k, v in value.items()}
    return value


class _Row:
    """to_json / from_json for the row dataclasses below (and a bench kind's own, kinds/)."""
    KEY: ClassVar[tuple[str, ...]] = ()
    SIZED: ClassVar[bool] = False   # its cells span message sizes: verdicts speak busbw, group by size range

    def to_json(self) -> dict:
        """The fields as a dict, lists and dicts copied two levels down: asdict's deep copy is too
        slow for 1024 ranks' round times."""
        return {f.name: _copied(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, data: dict, where: str):
        """The row in `data`, every present field checked, unknown keys left out; ResultError names the field."""
        row = cls(**load_fields(cls, data, f"{where}: extra_info"))
        row.check(where)
        return row

    def check(self, where: str) -> None:
        """What no single field's check can see: fields that must fit together."""


@keyword_dataclass
class Measured(_Row):
    """What every measured case has: where it ran, its launch and side, and stats.summarize's round
    statistics (the rank x round matrix whole, or summarised past stats.FULL_MATRIX_RANKS: ranks())."""
    backend: str = column("text", MISSING)
    nranks: int = column("count", 1)
    launch: int = column("whole", 0)                    # fresh worker group number (--repeat)
    side: str = column("text", "")                      # "A"/"B" of an interleaved A/B run
    rounds_interleaved: bool = column("flag", False)
    time_us: float | None = metric("time(us)", ".2f", "lower", ("compare",))
    min_us: float | None = column("amount")
    max_us: float | None = column("amount")
    mean_us: float | None = column("amount")
    iqr_us: float | None = column("amount")
    cv: float | None = column("amount")
    p95_us: float | None = column("amount")
    p99_us: float | None = column("amount")
    rank_spread: float | None = metric("spread", ".3f", "lower", ("table", "compare", "report"))
    rounds: int | None = column("whole")
    wrong: int | float | None = column("amount")         # None: the tool did not check (N/A)
    iters_per_round: int | None = column("count")
    calibration: dict = column("object", {})            # how K was chosen (collectives.timing.Calibrated)
    cores_rt_ns: list = column("list", [])              # ranks 0, 1: cores' round trip before, after (collectives/placement.py)
    round_cpu_wait_ns: list = column("list", [])        # per round, the longest any rank waited for a CPU (ns; stats.undisturbed)
    round_ns_per_rank: list = column("list", [])       # rank x round times (ns): every rank, or kept_ranks' (summary)
    per_rank: str = column("text", "full")              # "full": the whole matrix; "summary": past stats.FULL_MATRIX_RANKS
    kept_ranks: list = column("list", [])               # summary: whose rounds are kept (slowest; each round's slowest)
    rank_summary: dict = column("object", {})           # summary: min/p25/median/p75/max over rounds, one value per rank each
    rank_places: dict = column("object", {})            # rank -> [host, local rank] of the ranks the table and report name
    hosts: dict = column("object", {})                  # host -> ranks on it
    knobs: dict = column("object", {})                  # --knobs: the variables this case's group ran with
    group_env: dict = column("object", {})              # what the group's ranks ran with beyond the session's

    def check(self, where: str) -> None:
        if self.per_rank != "full":   # a full matrix is read as before, unchecked (imports may be ragged)
            try:
                self.ranks()
            except ValueError as exc:
                raise ResultError(f"{where}: extra_info per-rank data: {exc}") from None

    def ranks(self) -> RankView:
        """The per-rank data of either form (stats.RankView): medians, kept rounds, round maxima, places."""
        return RankView.of(self)


@keyword_dataclass
class CollectiveRow(Measured):
    """One collective case: what ran, how long it took, whether the result was right."""
    KIND: ClassVar[str] = "collective"
    BENCHES: ClassVar[tuple[str, ...]] = ()    # a collective row names no bench
    SIZED: ClassVar[bool] = True
    KEY: ClassVar[tuple[str, ...]] = ("backend", "algo", "op", "dtype", "redop", "inplace", "nranks")
    algo: str = column("text", MISSING)
    op: str = column("text", MISSING)
    dtype: str = column("text", "float32")
    redop: str = column("text", "none")
    inplace: bool = column("flag", False)
    bytes: int = column("whole", MISSING)
    count: int = column("whole", 0)
    size: int | None = column("whole")                 # the size asked for (bytes) before whole elements
    algbw_gbps: float | None = metric("algbw(GB/s)", ".3f", "higher", ())
    busbw_gbps: float | None = metric("busbw(GB/s)", ".3f", "higher", ())
    wrong_per_rank: list = column("list", [])
    algo_env: dict = column("object", {})
    imported: dict = column("object", {})               # an imported log's own columns (printed bandwidths, line)
    source: str = column("text", "benchmark")           # "field": production data (NCCL Inspector), never a benchmark
    link_class: str | None = column("text")            # intra-host, inter-host or mixed (from hosts)
    algo_ran: str | None = column("text")              # nccl: what NCCL_DEBUG_SUBSYS=TUNING says ran ("Ring/LL128")
    graph: bool = column("flag", False)                # --graph: rounds replayed from a captured device graph

    @staticmethod
    def series_label(s: Series, algo_label: Callable[[str, str], str]) -> str:
        red = f" {s.redop}" if s.redop not in (None, "none") else ""
        return (f"{s.op} {s.dtype}{red} {s.nranks} ranks {s.backend}/{algo_label(s.backend, s.algo or '')}"
                f"{' in-place' if s.inplace else ''}{' graph' if s.graph else ''}")


@keyword_dataclass
class LayerRow(Measured):
    """One layer case: a TP block (bench "linear") or a pipeline step (bench "pipeline")."""
    KIND: ClassVar[str] = "layer"
    BENCHES: ClassVar[tuple[str, ...]] = ("linear", "pipeline")
    KEY: ClassVar[tuple[str, ...]] = ("bench", "backend", "tp", "pp", "dp", "layer", "sequence_parallel", "impl",
                                      "schedule", "microbatches")
    bench: str = column("text", MISSING)
    tp: int = column("count", 1)
    pp: int = column("count", 1)
    dp: int = column("count", 1)
    hidden: int | None = column("count")
    seq: int | None = column("count")
    batch: int | None = column("count")
    step_us: float | None = metric("step(us)", ".1f", "lower", ("table", "report"))
    tokens_per_s: float | None = metric("tokens/s", ".0f", "higher", ("table",))
    peak_memory_bytes_per_rank: list = column("list", [])
    model_states_estimate_bytes: int | None = column("whole")
    placement_warnings: list = column("list", [])
    wrong_per_rank: list = column("list", [])
    checked: int | None = column("whole")               # elements compared with the single-rank reference (all ranks)
    err_to_tol: float | None = column("amount")         # the largest |parallel - reference| / tolerance (<= 1 passes)
    # TP blocks
    layer: str | None = column("text")
    sequence_parallel: bool | None = column("flag")
    impl: str | None = column("text")
    fwd_us: float | None = metric("fwd(us)", ".1f", "lower", ("table",), benches=("linear",))
    bwd_us: float | None = metric("bwd(us)", ".1f", "lower", ("table",), "real", ("linear",))   # fwd+bwd - fwd: can be < 0
    achieved_flops: float | None = metric("GFLOP/s", ".2f", "higher", ("table",), benches=("linear",), scale=1e9)
    matmul_flops: float | None = column("amount")
    efficiency: float | None = metric("eff", ".2f", "higher", ("table", "report"), benches=("linear",))
    comm_share: float | None = metric("comm", ".2f", "lower", ("table", "report"), "ratio", ("linear",))
    # comm_share x fwd+bwd: the TP block's collectives block on the critical path, none of it hidden
    comm_exposed_us: float | None = metric("exposed comm(us)", ".1f", "lower", ("table", "compare", "report"),
                                           benches=("linear",))
    # pipeline steps
    schedule: str | None = column("text")
    microbatches: int | None = column("count")
    layers: int | None = column("count")
    stage_compute_us_per_microbatch: list = column("list", [])
    bubble_measured: float | None = metric("bubble", ".3f", "lower", ("table", "report"), "real",
                                           ("pipeline",))   # 1 - m x compute / step: noise can push it below 0
    bubble_per_rank: list = column("list", [])
    bubble_theory: float | None = metric("theory", ".3f", "lower", ("table", "report"), "ratio", ("pipeline",))
    stages_per_rank: list = column("list", [])

    @staticmethod
    def series_label(s: Series, algo_label: Callable[[str, str], str]) -> str:
        what = (f"{s.layer}{'+sp' if s.sequence_parallel else ''} {s.impl}" if s.layer is not None
                else f"{s.schedule} m={s.microbatches}")
        return f"{s.bench} {s.backend} tp={s.tp} pp={s.pp} dp={s.dp} {what}"


@keyword_dataclass
class TuningRow(Measured):
    """One tuning case (benches/test_tuning.py): compute/communication overlap at one message size,
    a DDP-style gradient all_reduce at one bucket size, or one communication dtype of the gradients."""
    KIND: ClassVar[str] = "tuning"
    BENCHES: ClassVar[tuple[str, ...]] = ("overlap", "bucket", "compress")
    KEY: ClassVar[tuple[str, ...]] = ("bench", "backend", "op", "dtype", "nranks", "comm_dtype")
    bench: str = column("text", MISSING)
    bytes: int = column("whole", 0)                    # the size axis: message, bucket (0: per tensor), gradients
    op: str | None = column("text")                    # overlap: the collective started asynchronously
    dtype: str | None = column("text")
    count: int | None = column("whole")
    # overlap
    t_comm_us: float | None = metric("comm(us)", ".1f", "lower", ("table",), benches=("overlap",))
    t_comp_us: float | None = metric("comp(us)", ".1f", "lower", ("table",), benches=("overlap",))
    t_both_us: float | None = metric("both(us)", ".1f", "lower", ("table",), benches=("overlap",))
    overlap_efficiency: float | None = metric("overlap", ".2f", "higher", ("table", "compare", "report"), benches=("overlap",))
    overlap_efficiency_raw: float | None = metric("(raw)", ".2f", "higher", ("table",), "real",
                                                  ("overlap",))   # before clipping to [0, 1]
    matmul_n: int | None = column("count")                   # the square matmul sized to the collective
    # gradient bucketing and compression
    bucket_bytes: int | None = column("whole")              # 0: one all_reduce per tensor
    calls: int | None = metric("calls", "d", "lower", ("table",), "whole", ("bucket", "compress"))
    step_us: float | None = metric("step(us)", ".1f", "lower", ("table", "report"), benches=("bucket", "compress"))
    # gradient bytes / (calls x bucket cap): how full the buckets are (> 1: DDP's close-at-cap overshoot)
    bucket_fill: float | None = metric("fill", ".2f", "higher", ("table", "compare", "report"), benches=("bucket",))
    tensors: int | None = column("whole")
    model_bytes: int | None = column("whole")
    comm_dtype: str | None = column("text")
    max_rel_error: float | None = metric("max rel err", ".2e", "lower", ("table", "compare", "report"), benches=("compress",))
    mean_rel_error: float | None = metric("mean rel err", ".2e", "lower", ("table",), benches=("compress",))
    error_bound: float | None = metric("bound", ".2e", "lower", ("table",), benches=("compress",))   # relative to max |exact|

    @staticmethod
    def series_label(s: Series, algo_label: Callable[[str, str], str]) -> str:
        what = f" {s.op} {s.dtype}" if s.op else f" {s.comm_dtype}" if s.comm_dtype else ""
        return f"{s.bench}{what} {s.nranks} ranks {s.backend}"


@keyword_dataclass
class OverheadRow(_Row):
    """The harness's own cost per op against a bare loop (benches/test_overhead.py); never compared."""
    backend: str = column("text", MISSING)
    op: str = column("text", "all_reduce")
    dtype: str = column("text", "float32")
    bytes: int = column("whole", MISSING)
    nranks: int = column("count", 1)
    iters_per_round: int = column("count", MISSING)
    time_us: float = column("amount", MISSING)
    plain_us: float = column("amount", MISSING)
    ratio: float = column("amount", MISSING)
    added_us: float = column("real", MISSING)
    round_ns_per_rank: list = column("list", [])
    plain_round_ns_per_rank: list = column("list", [])


Row = Union[CollectiveRow, LayerRow, TuningRow]   # not `|`: a runtime alias, and 3.9 has no type union


SIDE_ROLES = {"A": "side A, baseline", "B": "side B, candidate"}


def side_labels(items: list[str]) -> dict[str, str]:
    """--label ['A=mpich 4.2.3', 'B=mpich 5.0'] -> {"A": ..., "B": ...}; ValueError on anything else."""
    labels = {}
    for item in items:
        side, sep, name = str(item).partition("=")
        if not sep or side.strip() not in SIDE_ROLES or not name.strip():
            raise ValueError(f"--label {item!r}: use A=NAME or B=NAME (A the baseline, B the candidate)")
        labels[side.strip()] = name.strip()
    return labels


def side_role(side: str) -> str:
    """Side A is the baseline, side B the candidate: every compare, history and report reads B against A."""
    return SIDE_ROLES.get(side, f"side {side}")


def layout(hosts: dict[str, int]) -> str:
    """Hosts x ranks per host as people say it: "2 hosts x 4", "1 host x 8", "2 hosts (3+1)"."""
    if not hosts:
        return "hosts unknown"
    counts = sorted(hosts.values(), reverse=True)
    per = f" x {counts[0]}" if len(set(counts)) == 1 else f" ({'+'.join(map(str, counts))})"
    return f"{len(counts)} host{'s' if len(counts) > 1 else ''}{per}"


def link_class(hosts: dict[str, int]) -> str:
    """Which links a collective over all ranks crosses: one host, one rank per host, or both kinds."""
    return "intra-host" if len(hosts) <= 1 else "inter-host" if max(hosts.values()) == 1 else "mixed"


def row_from_json(info: dict, where: str, row_types: Mapping[str, Any] = MappingProxyType({})) -> Row | None:
    """The row an extra_info holds, or None for entries that are not cells (overhead rows, foreign
    benchmarks); `row_types`: a named bench's row type (kinds.ROW_TYPES)."""
    if info.get("bench") in row_types:
        return row_types[info["bench"]].from_json(info, where)
    if "op" in info and "algo" in info:   # overhead rows carry no algo: they are not cells
        return CollectiveRow.from_json(info, where)
    return None


def knob_text(knobs: dict) -> str | None:
    """A case's --knobs values as a series names them: "NAME=value ..." (None without knobs)."""
    return " ".join(f"{k}={v}" for k, v in sorted(knobs.items())) or None


@dataclass(frozen=True)
class Series:
    """Everything that names a curve but the size: cells of one series are neighbours."""
    bench: str                      # "collective", "linear" or "pipeline"
    backend: str
    algo: str | None = None
    op: str | None = None
    dtype: str | None = None
    redop: str | None = None
    inplace: bool | None = None
    nranks: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    layer: str | None = None
    sequence_parallel: bool | None = None
    impl: str | None = None
    schedule: str | None = None
    microbatches: int | None = None
    comm_dtype: str | None = None
    knobs: str | None = None        # --knobs: "NAME=value ..." of the case's group, a series of its own
    graph: bool | None = None       # --graph: True for graph-captured rounds (eager series and old files: None)
    params: tuple | None = None     # (name, value) pairs of a kind's KEY fields that are none of the above
    row_type: Any = field(default=CollectiveRow, compare=False, repr=False)   # the row its cells hold: names it, keys it

    @classmethod
    def of(cls, row: Row) -> Series:
        return cls.of_fields(type(row), vars(row))

    @classmethod
    def of_fields(cls, row_type: type[Row], values: dict) -> Series:
        """The one derivation of a series, from a row's fields or from those it is about to be built
        with (kinds.base.Kind.cell_key)."""
        own = {f.name for f in fields(cls)}
        key: dict[str, Any] = {"bench": "collective", **{k: values.get(k) for k in row_type.KEY if k in own}}
        params = tuple((k, values.get(k)) for k in row_type.KEY if k not in own) or None
        return cls(**key, knobs=knob_text(values.get("knobs") or {}), graph=True if values.get("graph") else None,
                   params=params, row_type=row_type)

    @property
    def kind(self) -> str:
        return self.row_type.KIND

    def without_knobs(self) -> Series:
        return replace(self, knobs=None)

    def sort_key(self) -> tuple[str, ...]:
        return tuple(str(getattr(self, f.name)) for f in fields(self) if f.compare)

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.compare and getattr(self, f.name) is not None}
        params = dict(out.pop("params", ()))
        return {**out, **params}

    def label(self, algo_label: Callable[[str, str], str] = lambda backend, algo: algo) -> str:
        """What a reader calls the series; `algo_label(backend, algo)` names a backend's algorithm."""
        knobs = f" [{self.knobs}]" if self.knobs else ""
        return self.row_type.series_label(self, algo_label) + knobs


def key_order(key: tuple) -> tuple:
    """Sort order of cell keys (series, size): by series fields, then by size as a number."""
    series, size = key
    return (series.sort_key(), size)


@dataclass
class Cell:
    series: Series
    size: int                   # bytes for collectives, 0 for layers
    row: Row                    # the first launch's row: identity, hosts, environment
    launches: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # launch -> per-op seconds
    rows: dict[int, Row] = field(default_factory=dict)   # launch -> its row (metrics per launch)
    waited: dict[int, tuple[int, int]] = field(default_factory=dict)   # launch -> (rounds a rank waited for a CPU in, rounds)

    @property
    def key(self) -> tuple:
        return (self.series, self.size)

    @property
    def kind(self) -> str:
        return self.series.kind

    def pooled(self, name: str) -> float | None:
        """A metric over every launch: the median of the per-launch values (None if none has it)."""
        values = [v for r in self.rows.values() if (v := getattr(r, name, None)) is not None]
        return median(values) if values else None

    @property
    def launch_medians(self) -> list[float]:
        """Each launch's median per-op time (s), in launch order."""
        return [median(self.launches[i]) for i in sorted(self.launches)]

    @property
    def pooled_s(self) -> float:
        """Per-op time over every launch: the median of the per-launch medians (s)."""
        return median(self.launch_medians)

    @property
    def launch_spread(self) -> float:
        """How far launches disagree: slowest / fastest per-launch median (1.0 for one launch)."""
        return max(self.launch_medians) / min(self.launch_medians)


@dataclass
class Run:
    path: str
    cells: dict[tuple, Cell]
    meta: RunMeta               # its file's `hccl_bench`, checked and typed once as it was read
    side: str = ""              # "A"/"B" of an interleaved --ab-env run: launches pair up across sides
    started: str = ""           # ISO time (pytest-benchmark's `datetime`, else the file's): orders a history
    notes: list[str] = field(default_factory=list)   # what a reader must be told: rebuilt, incomplete, torn line

    @property
    def complete(self) -> bool:
        """False for a session that ended early (signal, -x, full disk) or was rebuilt from cases.jsonl."""
        return self.meta.complete

    @property
    def given_name(self) -> str:
        """The name a user gave: `--label SIDE=NAME` (pytest or the CLI) for a side, `import --label` for a run."""
        labels = {**(self.meta.options.labels if self.meta.options else {}), **self.meta.labels}
        return str(labels.get(self.side) or ("" if self.side else self.meta.label or ""))

    def name_as(self, name: str) -> None:
        """`--label SIDE=NAME` given to a reader (hccl-bench compare): this run, or its side, is called NAME."""
        self.meta = replace(self.meta, labels={**self.meta.labels, (self.side or ""): name},
                            label=self.meta.label if self.side else name)

    @property
    def provenance(self) -> dict:
        """What the run was measured on (harness/provenance.py): versions, environment, commit; {} where not recorded."""
        return self.meta.provenance

    @property
    def label(self) -> str:
        """The given name, else the CANN version or the run folder; a side says its role."""
        name = self.given_name or (self.provenance.get("cann") or {}).get("cann") or Path(self.path).parent.name or self.path
        return f"{name} ({side_role(self.side)})" if self.side else name

    def backends(self) -> list[str]:
        return sorted({c.series.backend for c in self.cells.values()})

    @property
    def setup(self) -> dict:
        """What must match between two runs for a comparison to mean anything."""
        groups = self.meta.groups.values()
        return {"backends": self.backends(),
                "nranks": sorted({c.row.nranks for c in self.cells.values()}),
                "hosts": sorted({len(g.get("hosts", {})) for g in groups}),
                "devices": sorted({str(d) for g in groups for d in g.get("devices", [])}),
                "mpi_thread_level": sorted({str(g["versions"]["mpi_thread_level"]) for g in groups
                                            if isinstance(g.get("versions"), dict) and "mpi_thread_level" in g["versions"]})}


# ---- writing: the one shape every writer produces ----

def bench_entry(name: str, row: Row, per_op_seconds: list[float], group: str = "") -> dict:
    """A pytest-benchmark-shaped entry for a row measured or imported outside a pytest session."""
    data = [float(t) for t in per_op_seconds]
    return {"name": name, "fullname": name, "group": group, "extra_info": row.to_json(),
            "stats": {"data": data, "median": median(data), "min": min(data), "max": max(data),
                      "mean": sum(data) / len(data), "rounds": len(data)}}


def result_file(entries: list[dict], meta: dict, started: str | None = None) -> dict:
    """A whole result file's content, with the schema written in."""
    out: dict = {"benchmarks": entries, "hccl_bench": {"schema": SCHEMA, **meta}}
    if started:
        out["datetime"] = started
    return out
