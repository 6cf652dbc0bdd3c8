"""What every bench kind is made of (`Kind`), what every case holds (`Case`), and the steps all
kinds share: launches, --knobs, typed results and the columns every table prints."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Generic, Optional, TypeVar, Union, cast

from collectives import algorithms, capabilities
from collectives.backends import algo_label, info
from collectives.sizes import format_size
from kinds.options import Options
from schema.group_key import GroupKey
from schema.kwonly import keyword_dataclass
from schema.results import Cell, Metric, Series
from schema.wire import Spec, Timed, result_from_json


@keyword_dataclass
class Case:
    """Where and how often a case runs; its group is None when it is skipped (with the reason)."""
    backend: str
    nranks: int
    group: Optional[GroupKey] = None
    skip: str = ""
    launch: int = 0
    side: str = ""                   # --ab-env: "A" or "B"
    partner: Optional[GroupKey] = None   # --ab-env: the other side's group (rounds alternate between them)
    knobs: dict = field(default_factory=dict)   # --knobs: this case's values (set in its group)

    @property
    def id(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class KindOption:
    """A pytest option a kind declares; `convert` turns its text into the value or raises ValueError."""
    flag: str
    default: str
    help: str
    convert: Callable[[str], Any] = str

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


class KindSettings:
    """A kind's own options, typed: one field per KindOption (named by its dest); the defaults live
    in the KindOptions alone."""
    flags: ClassVar[tuple[KindOption, ...]] = ()

    @classmethod
    def defaults(cls: type[_S]) -> _S:
        return cls(**{option.dest: option.convert(option.default) for option in cls.flags})

    @classmethod
    def of(cls: type[_S], opts: Options) -> _S:
        """This kind's settings in `opts` (Options.settings, by type), else the defaults."""
        given = next((s for s in opts.settings if isinstance(s, cls)), None)
        return given if given is not None else cls.defaults()


_S = TypeVar("_S", bound=KindSettings)


@dataclass(frozen=True)
class Bars:
    """A report panel of horizontal bars: a row per label, a bar per named series (end to end when `stacked`)."""
    xlabel: str
    labels: list[str]
    series: dict[str, list[float]]   # name -> one value per label
    log: bool = False
    stacked: bool = False


@dataclass(frozen=True)
class Lines:
    """A report panel of lines against message size (a point at size 0: a dashed level), or against
    `xlabel` when not `x_is_size`."""
    ylabel: str
    xlabel: str
    lines: dict[str, list[tuple[float, float]]]   # label -> (x, y)
    log: bool = False
    x_is_size: bool = True


Panel = Union[Bars, Lines]


@dataclass
class Ran:
    """A case that ran: its ranks' results, hosts (host -> ranks), places (rank -> (host, local
    rank)) and rank 0's log since it began."""
    results: list[dict]
    hosts: dict
    places: dict = field(default_factory=dict)
    rank0_log: Callable[[], str] = lambda: ""

    @property
    def rank_hosts(self) -> dict[int, str]:
        return {rank: host for rank, (host, _) in self.places.items()}


C = TypeVar("C", bound=Case)


class Kind(Generic[C]):
    """One bench kind: its cases, the spec its ranks run, the row made of their results and its
    table section; nothing outside a kind's module knows what a kind holds."""
    name: ClassVar[str]                       # the row's bench ("collective" for the sweep)
    title: ClassVar[str] = ""                 # its section of the report page
    case_type: ClassVar[type]
    row_type: ClassVar[type]                  # schema.results
    spec_types: ClassVar[tuple[type[Spec], ...]]
    rank: ClassVar[tuple[str, str]]           # (module, class) of the rank half: run(backend, spec), begin(...)
    record_key: ClassVar[str] = ""            # "": its rows are cells in cases.jsonl; else written under this key
    cells: ClassVar[bool] = True              # its rows are compared (cells of a run)
    settings: ClassVar[type[KindSettings]] = KindSettings   # its own pytest options (settings.flags), typed

    @property
    def sized(self) -> bool:
        """Its row type's SIZED (schema.results): a kind that makes no rows is not sized."""
        return getattr(getattr(self, "row_type", None), "SIZED", False)

    @property
    def fixture(self) -> str:
        """The pytest fixture its bench file takes cases from."""
        return f"{self.name}_case"

    def build(self, opts: Options) -> list[C]:
        """Every launch's cases (skipped ones with their reason)."""
        raise NotImplementedError

    def spec(self, case: C, opts: Options) -> Spec:
        raise NotImplementedError

    def row(self, case: C, opts: Options, ran: Ran) -> Any:
        raise NotImplementedError

    def what(self, case: C) -> str:
        """The case as a failure names it."""
        return f"{case.id} nranks={case.nranks}"

    def topic(self, case: C) -> str:
        """What the progress lines call the case's part of the sweep."""
        return self.name

    def identity(self, case: C) -> dict:
        """The row fields that name the case's cell, for the row builder and cell_key alike (its bench
        where the row type carries one)."""
        bench = {"bench": self.name} if "bench" in {f.name for f in fields(self.row_type)} else {}
        return {"backend": case.backend, "nranks": case.nranks, "knobs": case.knobs, **bench}

    def cell_key(self, case: C) -> tuple[Series, int]:
        """The (series, size) the case's rows will have (Series.of_fields, the one derivation)."""
        fields = self.identity(case)
        return Series.of_fields(self.row_type, fields), fields.get("bytes", 0)

    def table(self, rows: list) -> str:
        """This kind's section of the tables ("" without rows)."""
        raise NotImplementedError

    def panels(self, cells: list[tuple[str, Cell]]) -> list[Panel]:
        """What the report page draws of this kind's cells ((run name, cell) pairs); the page draws."""
        return []

    def closing_lines(self, rows: list) -> list[str]:
        """What the closing summary says of these rows (the peak busbw of the collective sweep)."""
        return []

    def launch_rows(self, cell: Cell, side: str) -> list:
        """A loaded cell's row of each launch, for the tables (a collective's with its launch's median time)."""
        return [replace(row, side=side) for _, row in sorted(cell.rows.items())]

    def case_id(self, row: Any, size: int) -> str:
        """The id the sweep gave the case of `row` (Case.id), launch and side left off."""
        return f"{Series.of(row).label(algo_label)} {format_size(size)}{knob_suffix(row.knobs)}"


def cell_label(name: str, cell: Cell) -> str:
    """A cell as a report panel names it: its series, and the run it is from."""
    return f"{cell.series.label()} [{name}]"


def placed(case: Case) -> dict:
    """The row fields every measured case carries from its placement."""
    return {"launch": case.launch, "side": case.side, "rounds_interleaved": case.partner is not None}


T = TypeVar("T", bound=Timed)


def typed(cls: type[T], results: list[dict]) -> list[T]:
    """The ranks' results as `cls` (schema.wire), each checked."""
    return [cast(T, result_from_json(cls, r, f"rank {i}'s result")) for i, r in enumerate(results)]


def launch_suffix(launch: int, side: str = "") -> str:
    return (f"-L{launch}" if launch else "") + (f"-{side}" if side else "")


def knob_suffix(knobs: dict) -> str:
    return "".join(f"-{k}={v}" for k, v in sorted(knobs.items()))


def with_knobs(templates: list, knobs: dict[str, list[str]]) -> list:
    """--knobs: every template once per combination of values, each in a group of its own."""
    if not knobs:
        return templates
    combos = [dict(zip(knobs, values)) for values in itertools.product(*knobs.values())]
    out = []
    for template in templates:
        for combo in combos:
            group = template.group and replace(template.group, env=tuple(sorted({**dict(template.group.env), **combo}.items())))
            out.append(replace(template, knobs=combo, group=group))
    return out


def side_python(opts: Options, side: str) -> str:
    """The interpreter a side's ranks run ("" = this one): side B's HCCL_BENCH_PYTHON in --ab-env/--ab-source."""
    return (opts.ab_env.get("HCCL_BENCH_PYTHON") or "") if side == "B" else ""


def launches(opts: Options, build_one: Callable[[Options], list], per_knobs: Callable[[list], list] = lambda t: t,
             top_up: bool = False) -> list:
    """Every launch repeats the selection in fresh groups (`top_up`: plus --top-up launches); with
    --ab-env each case has an A and a B item side by side, A first in even launches, B in odd ones."""
    sides = ("A", "B") if opts.two_sides else ("",)
    cases = []
    for launch in range(opts.repeat + (opts.top_up if top_up else 0)):
        order = sides if launch % 2 == 0 else sides[::-1]
        for template in per_knobs(with_knobs(build_one(opts), opts.knobs)):
            side_b = getattr(template, "side_b", None)   # side B loads another MPI build: its own variables
            groups = {}
            for side in sides:
                extra = {k: v for k, v in opts.ab_env.items() if k != "HCCL_BENCH_PYTHON"} if side == "B" else {}
                own = {"env": tuple(sorted({**dict(side_b[1]), **template.knobs}.items()))} if side == "B" and side_b else {}
                groups[side] = template.group and replace(template.group, launch=launch, side=side, **own,
                                                          python=side_python(opts, side), side_env=tuple(sorted(extra.items())))
            for side in order:
                own = {"env": side_b[0]} if side == "B" and side_b else {}
                case = replace(template, launch=launch, side=side, group=groups[side], **own)
                if side and case.group is not None:
                    case.partner = groups["B" if side == "A" else "A"]
                cases.append(case)
    return cases


def inplace_choices(backend: str, op: str, modes: tuple[str, ...]) -> list[tuple[bool, str]]:
    """(in-place?, skip reason) per requested mode; 'auto' prefers out-of-place where it exists."""
    have, lib = info(backend).forms(op), info(backend).api
    out = []
    for mode in modes:
        want = (False not in have) if mode == "auto" else mode == "in"
        missing = mode != "auto" and want not in have
        out.append((want, f"{lib} has no {'in-place' if want else 'out-of-place'} {op}" if missing else ""))
    return list(dict.fromkeys(out))


def capability_skip(target: capabilities.Target, algo: str, op: str, dtype: str, redop: str) -> str:
    """Why the capability table says this (op, dtype, redop) under `algo` cannot run here ('' if it can)."""
    backend = target.facts.backend
    return info(backend).skip_reason(target, algorithms.native_name(backend, algo), op, dtype, redop)


def no_dtype(backend: str, dtype: str) -> str:
    """Why `backend` cannot run `dtype` ('' if it can)."""
    have = info(backend).dtypes
    return "" if dtype in have else f"{backend} has no {dtype} datatype (has {', '.join(have)})"


# ---- the columns every table section prints ----

def heads(shown: list[Metric]) -> str:
    return "".join(f" {m.heading:>{m.width}}" for m in shown)


def values(row, shown: list[Metric]) -> str:
    return "".join(f" {m.text(getattr(row, m.name)):>{m.width}}" for m in shown)


def wrong_text(value) -> str:
    """#wrong as nccl-tests prints it: a count, N/A when the tool did not check."""
    return "N/A" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
