"""One pytest session's benchmark state (what ran, failed, was skipped), wiring the worker pool,
A/B pairing (ab_pairing.py), each case's kind (kinds/) and the run folder (run_store.py)."""
from __future__ import annotations

import functools
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kinds
from harness import provenance
from harness.engine.groups import CaseFailure, GroupKey, GroupPool
from harness.session.ab_pairing import ABPairing, PartnerFailed
from harness.session.night_budget import NightBudget
from harness.session.run_store import RunStore
from kinds.base import Case, Ran
from kinds.options import Options
from schema.judgement import GateResult
from schema.results import SCHEMA, ResultError, Row
from schema.run_meta import RunMeta
from schema.wire import Spec

if TYPE_CHECKING:
    from reports.placement import TopUp
    from reports.sequential import Sequential


class BenchSession:
    def __init__(self, opts: Options):
        self.opts = opts
        self.started = datetime.now(timezone.utc)
        self.interrupted: str | None = None   # the signal or reason the session ended early
        self.running = ""                      # the case in flight: named if a signal ends the session
        self.rows: list = []                 # every measured case's row, of every kind, in the order they ran
        self.skipped: list[dict] = []
        self.failures: list[dict] = []
        self.groups: dict[str, dict] = {}   # hosts/devices/versions per group, from the ranks
        self.verdicts: list[GateResult] = []   # --baseline comparison, --history guard: filled at session end
        self.sequential: Sequential | None = None   # --ab-until-decided: the latest look
        self.looked = 0                      # launches that look rested on
        self._decided: dict[tuple, str] = {}   # cell key -> why it is not measured again
        self.topped = 0                      # --top-up: the launch the short cells were last found for
        self._top_up: TopUp | None = None    # ... and which they are
        self._earlier: list | None = None    # ... judged against the --results folder's other runs, read once
        self.budget = NightBudget(opts.night_budget_s, opts.repeat) if opts.night_budget_s else None
        self.store = RunStore(opts.results, self.started.astimezone().strftime("%Y%m%d-%H%M%S"), self._session_line)
        self.pairing = ABPairing(self._call, self._run)

    @property
    def run_dir(self) -> Path:
        return self.store.run_dir

    def _session_line(self) -> dict:
        return {"schema": SCHEMA, "datetime": self.started.isoformat(), "options": asdict(self.opts),
                "provenance": self.provenance, **({"canary": self.canary} if self.canary else {})}

    @functools.cached_property
    def canary(self) -> dict | None:
        """Measured once as a timed single-stack sweep's run folder is made (canary.py)."""
        if not self.opts.benchmark or self.opts.two_sides:
            return None
        from harness.session import canary
        return canary.measure()

    @functools.cached_property
    def canary_spanning(self) -> dict | None:
        """The canary measured again after the sweep, joined to the first; an interrupted session keeps the first."""
        if self.canary is None or self.interrupted is not None:
            return self.canary
        from harness.session import canary
        return canary.spanning(self.canary, canary.measure())

    def _call(self, key: GroupKey, spec: Spec, label: dict):
        """One request to a group: (results, group), or the case fails with the reason recorded."""
        self.running = label["what"]
        try:
            return self.pool.run(key, spec, self.opts.timeout_s)
        except CaseFailure as exc:
            failure = str(exc)
        finally:
            self.running = ""
        self.failures.append({**label, "error": failure.splitlines()[0]})
        self.store.append({"failure": label, "error": failure})
        pytest.fail(f"{label['what']}: {failure}", pytrace=False)

    def _run(self, key: GroupKey, spec: Spec, label: dict) -> tuple[list[dict], dict]:
        """A case's results and its group's hosts/devices/versions (recorded once per group)."""
        results, group = self._call(key, spec, label)
        info = provenance.group_info(group.ranks)
        if group.log_dir.name not in self.groups:
            self.groups[group.log_dir.name] = {"env": key.rank_env, "side": key.side, "python": key.python,
                                               "local_env": group.local_env, **info}
            self.store.append({"group": {group.log_dir.name: self.groups[group.log_dir.name]}})
        return results, info

    def _so_far(self, *sides: str) -> tuple[list[Row], list]:
        """The cell rows measured so far, and each of `sides` of them as a run a verdict reads."""
        from reports.result_files import run_from_rows
        rows: list[Row] = [r for kind in kinds.KINDS if kind.cells for r in kinds.rows_of(kind, self.rows)]
        meta = RunMeta.of({"options": asdict(self.opts)})
        return rows, [run_from_rows(rows, side, str(self.run_dir), meta) for side in sides]

    def look(self, launches: int) -> list[str]:
        """--ab-until-decided: before launch `launches`, the looks so far (decided cells run no more); a new look's line."""
        from reports.sequential import planned_looks, run_looks  # scipy: loaded only when a look is due
        self.looked = launches
        if launches not in planned_looks(self.opts.repeat):
            return []
        base, cand = self._so_far("A", "B")[1]
        if not (set(base.cells) & set(cand.cells)):
            return []
        self.sequential = run_looks(base, cand, self.opts.repeat, min_effect=self.opts.min_effect, estimator=self.opts.estimator)
        self._decided = {c.key: f"decided after {self.sequential.decided_at[c.key]} launches: {c.verdict}"
                         for c in self.sequential.comparison.cells if c.key in self.sequential.decided_at}
        if not self.sequential.looks or self.sequential.looks[-1].launches != launches:
            return []   # every cell was decided at an earlier look
        self.store.append({"look": vars(self.sequential.looks[-1])})
        return self.sequential.progress[-1:]

    def top_up(self, launch: int) -> list[str]:
        """--top-up: before launch `launch`, the cells still short of --repeat launches in the usual placement."""
        from reports.history import load_runs, run_folders
        from reports.placement import TopUp, top_up
        self.topped = launch
        if self._top_up is not None and (self._top_up.stopped or not self._top_up.short):
            return []   # stopped, or no cell was short: nothing ran since
        rows, (tonight,) = self._so_far("")
        try:
            if self._earlier is None:   # read once: the earlier nights do not change during the session
                here = self.run_dir.resolve()
                others = [str(d) for d in run_folders(self.run_dir.parent) if d.resolve() != here]
                self._earlier = load_runs(others)[0] if others else []
        except (ResultError, OSError, ValueError) as exc:
            self._top_up = TopUp(frozenset(), f"the history could not be read ({exc})")
        else:
            earlier = self._earlier
            previous = ([getattr(r, "cores_rt_ns", None) for r in rows if r.launch == launch - 1]
                        if launch > self.opts.repeat else None)   # every case of the last top-up, judged or not
            self._top_up = top_up([*earlier, tonight], tonight, self.opts.repeat, previous)
        found, last = self._top_up, self.opts.repeat + self.opts.top_up - 1
        if found.stopped:
            return [f"# top-up launches stop before launch {launch}: {found.stopped}"]
        if not found.short:
            return [f"# top-up: every probed cell has {self.opts.repeat} launches with ranks 0 and 1's cores {found.usual} "
                    "(their usual placement); no top-up launch runs"]
        return [f"# top-up launch {launch} (up to {last}): {len(found.short)} cells have fewer than {self.opts.repeat} "
                f"launches with ranks 0 and 1's cores {found.usual} (their usual placement); only they run"]

    def decided(self, case: Case) -> str:
        """Why a sequential A/B, a --top-up launch or the night's budget needs this case no more ('' while it does)."""
        kind = kinds.of_case(case)
        if self.budget is not None and (why := self.budget.why_not(case.launch)):
            return why
        if case.launch >= self.opts.repeat and kind.cells:   # a --top-up launch
            if self.topped != case.launch:
                self.top_up(case.launch)
            assert self._top_up is not None
            return self._top_up.why_not(kind.cell_key(case), self.opts.repeat)
        return self._decided.get(kind.cell_key(case), "") if self._decided and kind.cells else ""

    def _measure(self, case: Case, label, spec: Spec) -> tuple[list[dict], dict]:
        """A case measured alone, or with its A/B partner (rounds interleaved)."""
        assert case.group is not None, "a skipped case is never run"
        if why := self.decided(case):
            pytest.skip(why)
        if case.partner is None:
            return self._run(case.group, spec, label(case))
        try:
            return self.pairing.measure(case, label, replace(spec, kind=f"{spec.kind}_begin"),
                                        spec.plan["rounds"])  # type: ignore[attr-defined]
        except PartnerFailed as exc:
            self.failures.append({**label(case), "error": f"its A/B partner failed: {exc}"})
            pytest.fail(f"{case.id}: its A/B partner failed: {exc}", pytrace=False)

    def run(self, case: Case):
        """Run one case of any kind into its row, kept and written to cases.jsonl at once; the bench gets the row."""
        kind = kinds.of_case(case)
        results, info = self._measure(case, lambda c: {"id": c.id, "what": kind.what(c)}, kind.spec(case, self.opts))
        row = kind.row(case, self.opts, Ran(results, info["hosts"], self._places(case), lambda: self._rank0_log(case)))
        self.rows.append(row)
        self.store.append({kind.record_key: row.to_json()} if kind.record_key else row.to_json())
        return row

    def _places(self, case: Case) -> dict[int, tuple[str, int]]:
        """rank -> (host, local rank) as the case's group's ranks reported them: the row names its slowest ranks."""
        group = (self.pool.alive.get(case.group) if case.group else None) or self.pool.current
        return {r["rank"]: (r["host"], r.get("local_rank", 0)) for r in group.ranks} if group else {}

    def _rank0_log(self, case: Case) -> str:
        """Rank 0's log since the case began (what a library printed of it, e.g. NCCL_DEBUG_SUBSYS=TUNING)."""
        group = self.pool.alive.get(case.group) if case.group else None
        log = group.log_dir / "rank0.log" if group is not None else None
        return group.since_last_case(log) if group is not None and log is not None and log.exists() else ""

    @functools.cached_property
    def pool(self) -> GroupPool:
        return GroupPool(self.run_dir / "logs", self.opts.driver_host, keep=2 if self.opts.two_sides else 1)

    @functools.cached_property
    def provenance(self) -> dict:
        """Collected once (git, MPI library, files): both result files of a session carry it."""
        return provenance.collect()

    def metadata(self) -> dict:
        return {"schema": SCHEMA, "options": asdict(self.opts), "provenance": self.provenance,
                "sequential": self.sequential.record() if self.sequential else None,
                **({"night_budget": self.budget.record()} if self.budget else {}),
                "groups": self.groups, "skipped": self.skipped, "failures": self.failures,
                **{k.record_key: [r.to_json() for r in kinds.rows_of(k, self.rows)] for k in kinds.KINDS if k.record_key},
                "complete": self.interrupted is None,
                "interrupted": self.interrupted, "wall_s": (datetime.now(timezone.utc) - self.started).total_seconds(),
                **({"canary": self.canary_spanning} if self.canary else {})}

    def close(self) -> None:
        if "pool" in self.__dict__:
            self.pool.close_all()
