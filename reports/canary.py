"""The canary's nights: which were noisy, and where the machine itself changed (docs/statistics.md,
"The canary"). A night is one point per workload, the log of its median sample; interference only
adds time, so only a slower night is noisy."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from reports.change_points import change_points
from schema.stats import median

MIN_STEP = 0.05           # a canary step smaller than this is not a change of the machine
NOISY_Z = 3.5             # robust z beyond which a night is noisy (Iglewicz & Hoaglin's cut)
NOISY_FLOOR = 0.25        # ... and at least this much slower than its level's median
NOISY_MIN_NIGHTS = 5      # other nights of its level a night is measured against (a MAD of fewer says little)
NEAR = 1                  # a cell's change and a canary step this many runs apart are one event


@dataclass
class Step:
    """A canary workload's new level: from the run `at` on, its time is `ratio` times the old."""
    workload: str
    at: int
    ratio: float
    before: str       # the figures as people read them: "5.10 GB/s"
    after: str

    def text(self, label: str = "") -> str:
        since = f" from {label}" if label else ""
        return f"canary {self.workload} {self.before} -> {self.after} ({self.ratio - 1:+.0%} time){since}"


@dataclass
class CanaryView:
    """Per workload the nights' median sample (s; None where a run has no canary) and what they show."""
    seconds: dict[str, list[float | None]] = field(default_factory=dict)
    workloads: dict[str, dict] = field(default_factory=dict)     # workload -> what one sample is (bytes, unit)
    steps: list[Step] = field(default_factory=list)
    noisy: dict[int, str] = field(default_factory=dict)          # run index -> the canary's figures that made it noisy
    spread: dict[str, float] = field(default_factory=dict)      # workload -> usual night-to-night spread (robust sd, log)
    level: dict[str, float] = field(default_factory=dict)       # workload -> the median of its nights (s)

    @property
    def nights(self) -> int:
        return max((sum(v is not None for v in s) for s in self.seconds.values()), default=0)


def figure(workload: str, what: dict, seconds: float) -> str:
    """A median sample as its workload's figure: GB/s, us per round trip, ms per loop."""
    unit = what.get("unit", "s")
    if unit == "GB/s":
        return f"{what.get('bytes', 0) / seconds / 1e9:.2f} GB/s"
    if unit.startswith("us"):
        return f"{seconds / max(1, what.get('round_trips', 1)) * 1e6:.0f} us/round trip"
    if unit.startswith("ms"):
        return f"{seconds * 1e3:.1f} ms/loop"
    return f"{seconds:.4g} s"


def _nights(runs: list) -> CanaryView:
    """Nights measured the way the newest canary was (its version): a canary that changed what a
    night's figure is starts its levels afresh instead of showing as a step of the machine."""
    view = CanaryView()
    canaries = [run.meta.canary for run in runs]
    versions = [c.version if c is not None else None for c in canaries]
    newest = next((v for v in reversed(versions) if v is not None), None)
    for i, canary in enumerate(canaries):
        for name, w in (canary.workloads if canary is not None and versions[i] == newest else {}).items():
            samples = w.get("samples") if isinstance(w, dict) else None
            if not isinstance(samples, list) or not samples or not all(
                    isinstance(s, (int, float)) and np.isfinite(s) and s > 0 for s in samples):
                continue
            view.seconds.setdefault(str(name), [None] * len(runs))[i] = median(samples)
            view.workloads.setdefault(str(name), {k: v for k, v in w.items() if k != "samples"})
    return view


def judge(runs: list, alpha: float) -> CanaryView:
    """The canary of `runs` (time order): its steps and its noisy nights."""
    view = _nights(runs)
    reasons: dict[int, list[str]] = {}
    for name, secs in view.seconds.items():
        idx = [i for i, s in enumerate(secs) if s is not None]
        view.level[name] = median([secs[i] for i in idx])
        y = np.log(np.array([s for s in secs if s is not None], dtype=np.float64))
        edges = [0]
        cuts = [at for at, _ in change_points(y, alpha)]
        for at, stop in zip(cuts, [*cuts[1:], len(y)]):
            before, after = median(y[edges[-1]:at]), median(y[at:stop])
            if abs(after - before) >= np.log(1 + MIN_STEP):
                edges.append(at)
                view.steps.append(Step(name, idx[at], float(np.exp(after - before)),
                                       figure(name, view.workloads[name], float(np.exp(before))),
                                       figure(name, view.workloads[name], float(np.exp(after)))))
        edges.append(len(y))
        spreads = []
        for a, b in zip(edges[:-1], edges[1:]):
            for j in range(a, b):
                others = np.delete(y[a:b], j - a)
                if others.size < NOISY_MIN_NIGHTS:
                    continue
                center = median(others)
                sd = 1.4826 * median(np.abs(others - center))
                spreads.append(sd)
                if y[j] - center > max(NOISY_Z * sd, np.log(1 + NOISY_FLOOR)):
                    reasons.setdefault(idx[j], []).append(
                        f"canary {name} {figure(name, view.workloads[name], float(np.exp(y[j])))} against its usual "
                        f"{figure(name, view.workloads[name], float(np.exp(center)))} ({np.exp(y[j] - center) - 1:+.0%} time)")
        if spreads:
            view.spread[name] = median(spreads)
    view.noisy = {i: "; ".join(r) for i, r in sorted(reasons.items())}
    return view


def coinciding(view: CanaryView, at: int, worse: bool) -> Step | None:
    """A canary step within NEAR runs of a cell's change at run `at`, in the same direction (the
    canary slower when the cell got slower): the change is the machine's, not the stack's."""
    near = [s for s in view.steps if abs(s.at - at) <= NEAR and (s.ratio > 1) == worse]
    return max(near, key=lambda s: abs(np.log(s.ratio)), default=None)
