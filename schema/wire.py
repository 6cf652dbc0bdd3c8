"""What the driver and the ranks send each other: spec and result dataclasses, as JSON objects
(never pickles) checked field by field against their annotations, so a malformed message is one
`WireError` line; "<kind>_begin" asks for the round-interleaved A/B form of a case."""
from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Optional, TypeVar

from schema.kwonly import keyword_dataclass


class WireError(ValueError):
    """A message that is not a spec or result of a known kind; the text names the kind and field."""


SPECS: dict[str, type[Spec]] = {}   # spec kind -> its type, filled as each Spec subclass is defined


# ---- specs: driver -> ranks ----

@keyword_dataclass
class Spec:
    KINDS: ClassVar[tuple[str, ...]] = ()
    REQUIRED: ClassVar[tuple[str, ...]] = ()   # fields a message must carry although the class gives a default
    FAULT_NAMES: ClassVar[tuple[str, ...]] = ()   # what NAME in HCCL_BENCH_FAULT=MODE:RANK:NAME calls its cases
    kind: str
    timeout_s: float = 0.0          # set by the driver when it sends the spec (the hang dump's delay)
    corrupt: bool = False           # set on the faulting rank only (HCCL_BENCH_FAULT=corrupt, harness/engine/worker.py)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for kind in cls.__dict__.get("KINDS", ()):
            if SPECS.setdefault(kind, cls) is not cls:
                raise TypeError(f"spec kind {kind!r} is declared twice: {SPECS[kind].__name__} and {cls.__name__}")

    @property
    def begins(self) -> bool:
        """The A/B form: check and warm up now, time single rounds on the driver's "round" steps."""
        return self.kind.endswith("_begin")

    def fault_names(self) -> set[str]:
        """What NAME in HCCL_BENCH_FAULT=MODE:RANK:NAME may call this case (none for a step)."""
        return set(self.FAULT_NAMES)


@keyword_dataclass
class Step(Spec):
    """An A/B pair's next round ("round") or its result ("end") for the case begun in this group."""
    KINDS = ("round", "end")


@keyword_dataclass
class OpCall(Spec):
    """The one collective call a collective case or an overlap bench times: `count` elements of
    `dtype` through `op` (reduced by `redop`, in place or not); op "" is no call (bucketing)."""
    op: str = ""
    dtype: str = "float32"
    redop: str = "sum"
    count: int = 0
    inplace: bool = False


@keyword_dataclass
class CollectiveSpec(OpCall):
    KINDS = ("collective", "collective_begin")
    REQUIRED = ("op", "dtype", "redop", "count", "inplace")
    kind: str = "collective"
    plan: dict                      # collectives.timing.Plan's fields

    def fault_names(self) -> set[str]:
        return {self.op}


@keyword_dataclass
class OverheadSpec(Spec):
    """The harness's loop against a bare loop of the same all_reduce on the same buffer."""
    KINDS = ("overhead",)
    kind: str = "overhead"
    op: str = "all_reduce"
    dtype: str = "float32"
    count: int
    plan: dict

    def fault_names(self) -> set[str]:
        return {self.op}


@keyword_dataclass
class LayerSpec(Spec):
    """What a TP block and a pipeline step share: the layout, the model's shape and the timing plan."""
    pp: int = 1
    tp: int
    hidden: int
    seq: int
    batch: int
    plan: dict = field(default_factory=dict)
    check: bool = False             # run the check against the single-rank reference alone, return its record
    seed: int = 1234
    dtype: str = "float32"


@keyword_dataclass
class LinearSpec(LayerSpec):
    """A TP block (kinds/linear.py): its layer ("linear" or "mlp"), sequence parallel, impl ("manual", "dtensor")."""
    KINDS = ("linear", "linear_begin")
    kind: str = "linear"
    layer: str = ""
    sp: bool = False
    impl: str = ""

    def fault_names(self) -> set[str]:
        return {n for n in ("linear", self.layer) if n}


@keyword_dataclass
class PipelineSpec(LayerSpec):
    """A pipeline step (kinds/pipeline.py)."""
    KINDS = ("pipeline", "pipeline_begin")
    FAULT_NAMES = ("pipeline",)
    kind: str = "pipeline"
    schedule: str = ""
    microbatches: int = 0
    layers: int = 0                 # model layers (0: pp x the schedule's virtual stages)
    model: str = ""                 # "sleep" for SleepLayers of fwd_s / bwd_s (the bubble tests)
    fwd_s: float = 0.0
    bwd_s: float = 0.0


@keyword_dataclass
class TuningSpec(OpCall):
    """Overlap (op at a size), bucketing (bucket_bytes, 0: per tensor) or compression (comm_dtype)."""
    KINDS = ("tuning", "tuning_begin")
    kind: str = "tuning"
    bench: str
    hidden: int
    layers: int
    plan: dict
    bucket_bytes: int = 0
    comm_dtype: str = ""

    def fault_names(self) -> set[str]:
        return {n for n in (self.bench, self.op) if n}


@keyword_dataclass
class DoctorSpec(Spec):
    """hccl-bench doctor's exchanges: links (rounds of disjoint pairs), rings (rounds of disjoint rings)."""
    KINDS = ("doctor_links", "doctor_rings")
    rounds: list[list[list[int]]]
    bytes: int
    reps: int
    small_reps: int = 0             # 0: reps


@keyword_dataclass
class DoctorSkewSpec(Spec):
    """hccl-bench doctor's arrival skew: `rounds` of `work` fixed matmuls (matrix x matrix), then an all_reduce."""
    KINDS = ("doctor_skew",)
    FAULT_NAMES = ("doctor",)
    kind: str = "doctor_skew"
    rounds: int
    work: int
    matrix: int
    slow: float = 1.0               # set on the faulting rank only (HCCL_BENCH_FAULT=slow:RANK:doctor:FACTOR)


EXIT = {"cmd": "exit"}              # the driver's last message to a group (not a spec)


@keyword_dataclass
class ExpertSpec(Spec):
    """One MoE layer step on ep ranks (groups of ep consecutive ranks; the rest data-parallel replicas)."""
    KINDS = ("expert", "expert_begin")
    FAULT_NAMES = ("expert",)
    kind: str = "expert"
    ep: int
    experts: int
    topk: int
    hidden: int
    ffn: int
    tokens: int                     # per rank
    routing: str                    # uniform, random, skewed, hotrank, file
    hot_share: float = 0.0          # skewed: expert 0's share of slots; hotrank: ep rank 0's weight; masked, uneven
    expert_ids: list[int] = field(default_factory=list)   # file: the replayed expert ids, cycled
    capacity_factor: float = 0.0    # 0: no capacity; else slots past ceil(cf x tokens x ep x topk / experts) per expert drop
    drop_policy: str = "group"      # group: the group's first slots; probs / position: Megatron's per-rank drop
    impl: str
    seed: int = 1234
    dtype: str = "float32"
    plan: dict


@keyword_dataclass
class HybridSpec(Spec):
    """One training step on tp x pp x dp ranks (layers/hybrid_tasks.py)."""
    KINDS = ("hybrid", "hybrid_begin")
    FAULT_NAMES = ("hybrid",)
    kind: str = "hybrid"
    tp: int
    pp: int
    dp: int
    hidden: int
    seq: int
    batch: int                      # per dp replica
    layers: int
    microbatches: int
    schedule: str                   # pp > 1
    bucket_bytes: int               # DDP's bucket cap (0: one bucket per gradient)
    seed: int = 1234
    dtype: str = "float32"
    distributed_optimizer: bool = False   # dp reduce_scatter + SGD on the shard + all_gather (Megatron's)
    grad_reduce: str = "float32"          # the dtype the dp gradients are reduced in
    sequence_parallel: bool = False       # Megatron's sequence parallelism in the tp blocks
    vpp: int = 0                          # interleaved schedules' chunks per rank (0: the schedule's own)
    plan: dict


# ---- a rank's launch: driver -> ranks, through the environment ----

@dataclass(frozen=True)
class RankLaunch:
    """What every rank needs before any connection exists; launchers pass only the environment
    through, so it travels as variables."""
    ENV: ClassVar[dict[str, str]] = {"backend": "HCCL_BENCH_BACKEND", "driver_host": "HCCL_BENCH_DRIVER_HOST",
                                     "driver_port": "HCCL_BENCH_DRIVER_PORT", "token": "HCCL_BENCH_TOKEN",
                                     "log_dir": "HCCL_BENCH_LOG_DIR"}
    backend: str
    driver_host: str
    driver_port: int
    token: str                      # the start-up accept's shared secret (harness/engine/control.py)
    log_dir: str = ""               # rank<R>.log goes here ("" = stdout/stderr stay as the launcher set them)

    def to_env(self) -> dict[str, str]:
        return {var: str(getattr(self, name)) for name, var in self.ENV.items()}

    @classmethod
    def from_env(cls, env: typing.Mapping[str, str]) -> RankLaunch:
        """The launch in `env`, or one WireError line naming the missing or bad variable."""
        missing = [var for name, var in cls.ENV.items() if name != "log_dir" and not env.get(var)]
        if missing:
            raise WireError(f"{missing[0]} is not set: a rank is started by hccl-bench's driver, which sets it")
        port = env[cls.ENV["driver_port"]]
        if not port.isdigit():
            raise WireError(f"{cls.ENV['driver_port']}={port!r} is not a port number")
        return cls(backend=env[cls.ENV["backend"]], driver_host=env[cls.ENV["driver_host"]], driver_port=int(port),
                   token=env[cls.ENV["token"]], log_dir=env.get(cls.ENV["log_dir"], ""))


# ---- results: each rank -> driver ----

@keyword_dataclass
class Timed:
    """What every timed bench returns: #wrong of its check, K, this rank's round times, K's calibration."""
    wrong: int
    iters: int
    round_ns: list[int]
    calibration: dict = field(default_factory=dict)
    cores_rt_ns: list = field(default_factory=list)   # ranks 0, 1 on one node: cores' round trip before, after
    cpu_wait_ns: list = field(default_factory=list)   # per round, how long this rank waited for a CPU (ns)


@keyword_dataclass
class CollectiveResult(Timed):
    pass


@keyword_dataclass
class OverheadResult(Timed):
    plain_round_ns: list[int]


@keyword_dataclass
class Checked(Timed):
    """A layer bench: elements checked against the single-rank reference, the worst error / tolerance."""
    checked: int
    err_to_tol: float
    peak_memory_bytes: Optional[int]   # not `int | None`: _build evaluates annotations, and 3.9 cannot
    params_local: int


@keyword_dataclass
class TpResult(Checked):
    fwd_ns: list[int]
    fwd_bwd_ns: list[int]
    matmul_ns: list[int]
    flops_per_iter: float
    tokens_per_iter: int
    comm_share: Optional[float]


@keyword_dataclass
class PipelineResult(Checked):
    compute_ns: list[int]
    stages: list[int]


@keyword_dataclass
class OverlapResult(Timed):
    comm_round_ns: list[int]
    comp_round_ns: list[int]
    matmul_n: int


@keyword_dataclass
class BucketResult(Timed):
    calls: int
    tensors: int
    model_bytes: int


@keyword_dataclass
class CompressResult(BucketResult):
    bucket_bytes: int
    max_rel_error: float
    mean_rel_error: float
    error_bound: float


@keyword_dataclass
class ExpertResult(Checked):
    dispatch_ns: list[int]
    combine_ns: list[int]
    expert_ns: list[int]
    tokens_per_expert: list[int]    # routed slots per expert over the ep group, before drops
    tokens_per_rank: list[int]      # slots each ep rank's experts received, after drops
    dropped: int                    # slots this rank's tokens lost to capacity
    sent_bytes: int                 # bytes this rank sends to other ranks per step (dispatch + combine, forward)
    recv_bytes: int = 0             # dispatch's received rows x hidden x element size, own included (DeepEP's count)
    local_bytes: int = 0            # of recv_bytes, the rows from this rank itself (no link crossed)
    masked: int = 0                 # this rank's selections masked by the routing (sent nowhere)
    comm_share: float


@keyword_dataclass
class HybridResult(Checked):
    nodp_ns: list[int]              # the step with the dp reduction off (dp = 1: the step)
    notp_ns: list[int]              # ... and the tp collectives left out too (tp = 1: nodp)
    compute_ns: list[int]
    tp_ns: float                    # per step (the extra run), inside the tp collectives
    p2p_ns: float                   # ... inside the pipeline's sends and receives (posting and waiting)
    p2p_bytes: int                  # ... the bytes those moved (sent + received)
    exchange_ns: float              # one microbatch's activation around the pp ring, every stage ready
    exchange_bytes: int             # ... its bytes each way
    dp_ns: float                    # ... the dp reduction's wait at the end (and the distributed optimizer's all_gather)
    timed_step_ns: float            # ... the whole step
    device_name: str
    matmul_flops: float             # FLOP/s of the block's matmul alone on this rank (every rank at once)
    stages: list[int]
    buckets: int
    dp_bytes: int                   # gradient bytes this rank all_reduces per step
    cpus: list[int]                 # the CPUs this rank may run on (its affinity)
    machine: str                    # its kernel's boot id: ranks on one machine share its cores
    cpu_notp_ns: float              # its process's CPU time per step of the notp loop (median over rounds)


# ---- the one pair of functions ----

def to_json(message: Spec | Timed) -> dict:
    """The JSON object of a spec or result: one key per field (nested values are plain JSON)."""
    return {f.name: getattr(message, f.name) for f in fields(message)}


def spec_from_json(data: object) -> Spec:
    """The spec a wire message holds, or one WireError line (unknown kind, missing, extra or mistyped field)."""
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise WireError(f"a spec must be a JSON object with a string kind, got {_short(data)}")
    if data["kind"] not in SPECS:
        raise WireError(f"unknown spec kind {_short(data['kind'])} (known: {', '.join(SPECS)})")
    return _build(SPECS[data["kind"]], data, f"{data['kind']} spec")


T = TypeVar("T", Spec, Timed)


def result_from_json(cls: type[T], data: object, where: str = "a rank's result") -> T:
    """A rank's result as `cls`, checked field by field, or one WireError line."""
    if not isinstance(data, dict):
        raise WireError(f"{where} must be a JSON object, got {_short(data)}")
    return _build(cls, data, where)


def _build(cls: type[T], data: dict, where: str) -> T:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    if extra := sorted(set(data) - known):
        raise WireError(f"{where}: unknown field {_short(extra[0])}")
    for f in fields(cls):
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING or f.name in getattr(cls, "REQUIRED", ()):
                raise WireError(f"{where}: field {f.name} is missing")
        elif not _is(data[f.name], hints[f.name]):
            raise WireError(f"{where}: field {f.name} must be {_name(hints[f.name])}, got {_short(data[f.name])}")
    return cls(**data)


def _is(value: Any, hint: Any) -> bool:
    """value matches the annotation: bool is not an int, an int is a float, list[X] checks each item."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(types, "UnionType", typing.Union)):   # UnionType: `X | Y`, 3.10+
        return any(_is(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_is(v, typing.get_args(hint)[0]) for v in value)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def _name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if typing.get_args(hint) else getattr(hint, "__name__", str(hint))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
