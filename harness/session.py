"""One pytest session's benchmark state: the worker pool, what ran, what was skipped, where it goes."""
from __future__ import annotations

import functools
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from collectives import stats
from collectives.sizes import format_size
from harness import files, provenance
from harness.cases import Case, LayerCase
from harness.groups import CaseFailure, GroupKey, GroupPool
from harness.options import Options
from layers import memory, schedules
from layers.mesh import ParallelDims, tp_placement
from reports.results import SCHEMA, CollectiveRow, LayerRow


class BenchSession:
    def __init__(self, opts: Options):
        self.opts = opts
        self.started = datetime.now(timezone.utc)
        self.interrupted: str | None = None   # the signal or reason the session ended early
        self.running = ""                      # the case in flight: named if a signal ends the session
        self.rows: list[CollectiveRow] = []   # every measured collective case, for the tables
        self.overhead: list[dict] = []
        self.layer_rows: list[LayerRow] = []
        self.skipped: list[dict] = []
        self.failures: list[dict] = []
        self.groups: dict[str, dict] = {}   # hosts/devices/versions per group, from the ranks
        self.verdicts: list[dict] = []      # --baseline comparison, --history guard: filled at session end
        self.pairs: dict[str, object] = {}  # --ab-env: the partner's measured result (or failure) by case id

    def _call(self, key: GroupKey, spec: dict, label: dict):
        """One request to a group: (results, group), or the case fails with the reason recorded."""
        self.running = label["what"]
        try:
            return self.pool.run(key, spec, self.opts.timeout_s)
        except CaseFailure as exc:
            failure = str(exc)
        finally:
            self.running = ""
        self.failures.append({**label, "error": failure.splitlines()[0]})
        self._append({"failure": label, "error": failure})
        pytest.fail(f"{label['what']}: {failure}", pytrace=False)

    def _run(self, key: GroupKey, spec: dict, label: dict) -> tuple[list[dict], dict]:
        """A case's results and its group's hosts/devices/versions (recorded once per group)."""
        results, group = self._call(key, spec, label)
        info = provenance.group_info(group.ranks)
        if group.log_dir.name not in self.groups:
            self.groups[group.log_dir.name] = {"env": dict(key.env), "local_env": group.local_env, **info}
            self._append({"group": {group.log_dir.name: self.groups[group.log_dir.name]}})
        return results, info

    @staticmethod
    def _label(case: Case) -> dict:
        return {"id": case.id, "what": f"{case.op} {format_size(case.size)} {case.dtype} algo={case.algo} "
                                       f"backend={case.backend} nranks={case.nranks}{' side ' + case.side if case.side else ''}"}

    def run_collective(self, case: Case) -> dict:
        plan = self.opts.plan()
        if case.partner is None:
            results, info = self._run(case.group, case.spec(plan), self._label(case))
        else:
            results, info = self._paired(case, self._label, {**case.spec(plan), "kind": "collective_begin"}, plan["rounds"])
        return self._record_collective(case, results, info)

    def _paired(self, case, label, begin: dict, rounds: int) -> tuple[list[dict], dict]:
        """--ab-env: the pair's first item measures both sides and leaves the other's (results,
        info), or its failure, for the second item."""
        measured = self.pairs.pop(case.id, None)
        if measured is None:
            partner = replace(case, side="B" if case.side == "A" else "A", group=case.partner, partner=case.group)
            try:
                measured, self.pairs[partner.id] = self._run_pair((case, partner), label, begin, rounds)
            except BaseException as exc:
                self.pairs[partner.id] = exc
                raise
        if isinstance(measured, BaseException):
            self.failures.append({**label(case), "error": f"its A/B partner failed: {str(measured).splitlines()[0]}"})
            pytest.fail(f"{case.id}: its A/B partner failed: {measured}", pytrace=False)
        return measured

    def _run_pair(self, pair: tuple, label, begin: dict, rounds: int) -> tuple:
        """Prepare the case in both sides' groups, then alternate single rounds between them (ABBA),
        so a pair of rounds is milliseconds apart; each group keeps its times until "end"."""
        for c in pair:
            self._call(c.group, begin, label(c))
        for r in range(rounds):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                self._call(pair[i].group, {"kind": "round"}, label(pair[i]))
        return tuple(self._run(c.group, {"kind": "end"}, label(c)) for c in pair)

    def _record_collective(self, case: Case, results: list[dict], info: dict) -> dict:
        k = results[0]["iters"]
        matrix = [r["round_ns"] for r in results]
        row = CollectiveRow(
            launch=case.launch, side=case.side, rounds_interleaved=case.partner is not None,
            backend=case.backend, algo=case.algo, op=case.op, dtype=case.dtype, redop=case.redop,
            inplace=case.inplace, nranks=case.nranks, size=case.size, bytes=case.nbytes, count=case.count,
            **stats.summarize(matrix, k, case.op, case.nbytes, case.nranks),
            wrong=sum(r["wrong"] for r in results), wrong_per_rank=[r["wrong"] for r in results],
            iters_per_round=k, round_ns_per_rank=matrix, algo_env=case.env, group_env=dict(case.group.env),
            hosts=info["hosts"])
        self.rows.append(row)
        extra = row.to_json()
        self._append(extra)
        return extra

    def run_overhead(self, backend: str, size: int, key: GroupKey) -> dict:
        count = max(1, size // 4)
        plan = self.opts.plan()
        if self.opts.benchmark:
            plan["rounds"] = max(plan["rounds"], 40)
        spec = {"kind": "overhead", "op": "all_reduce", "dtype": "float32", "count": count, "plan": plan}
        label = {"id": f"overhead-{backend}-{size}", "what": f"overhead all_reduce {size}B backend={backend}"}
        results, _ = self._run(key, spec, label)
        k = results[0]["iters"]
        harness = stats.per_op_seconds([r["round_ns"] for r in results], k)
        h_med = stats.median_seconds([r["round_ns"] for r in results], k)
        p_med = stats.median_seconds([r["plain_round_ns"] for r in results], k)
        row = {"backend": backend, "op": "all_reduce", "dtype": "float32", "bytes": count * 4, "nranks": key.nproc,
               "iters_per_round": k, "time_us": h_med * 1e6, "plain_us": p_med * 1e6,
               "ratio": h_med / p_med if p_med > 0 else float("inf"), "added_us": (h_med - p_med) * 1e6,
               "round_ns_per_rank": [r["round_ns"] for r in results],
               "plain_round_ns_per_rank": [r["plain_round_ns"] for r in results]}
        self.overhead.append(row)
        self._append({"overhead": row})
        return {"per_op_seconds": harness, "row": row}

    @staticmethod
    def _layer_label(case: LayerCase) -> dict:
        return {"id": case.id, "what": f"{case.id} (tp={case.tp} pp={case.pp} dp={case.dp})"}

    def run_layer(self, case: LayerCase) -> dict:
        o = self.opts
        spec = case.spec(o)
        if case.partner is None:
            results, info = self._run(case.group, spec, self._layer_label(case))
        else:
            results, info = self._paired(case, self._layer_label, {**spec, "kind": "layer_begin"}, spec["plan"]["rounds"])
        k = results[0]["iters"]
        step = [r["round_ns"] for r in results]
        group = self.pool.alive.get(case.group) or self.pool.current
        row = LayerRow(
            launch=case.launch, side=case.side, rounds_interleaved=case.partner is not None, backend=case.backend,
            bench="linear" if case.task == "tp_bench" else "pipeline", tp=case.tp, pp=case.pp, dp=case.dp,
            nranks=case.nranks, hidden=o.hidden, seq=o.seq, batch=o.batch, **stats.summarize(step, k),
            iters_per_round=k, round_ns_per_rank=step, hosts=info["hosts"], wrong=0,
            peak_memory_bytes_per_rank=[r["peak_memory_bytes"] for r in results],
            model_states_estimate_bytes=int(sum(memory.model_states(max(r["params_local"] for r in results), 1, 1))),
            placement_warnings=tp_placement(ParallelDims.fit(case.tp, case.pp, case.nranks),
                                            {r["rank"]: r["host"] for r in group.ranks} if group else {}))
        step_s = stats.median_seconds(step, k)
        if case.task == "tp_bench":
            fwd_s = stats.median_seconds([r["fwd_ns"] for r in results], k)
            fb_s = stats.median_seconds([r["fwd_bwd_ns"] for r in results], k)
            mm_s = stats.median_seconds([r["matmul_ns"] for r in results], k)
            flops = results[0]["flops_per_iter"]
            shares = [r["comm_share"] for r in results if r["comm_share"] is not None]
            row = replace(row, layer=case.layer, sequence_parallel=case.sp, impl=case.impl, fwd_us=fwd_s * 1e6,
                          bwd_us=(fb_s - fwd_s) * 1e6, step_us=step_s * 1e6,
                          tokens_per_s=results[0]["tokens_per_iter"] / step_s, achieved_flops=flops / fb_s,
                          matmul_flops=flops / mm_s, efficiency=mm_s / fb_s,
                          comm_share=sum(shares) / len(shares) if shares else None)
        else:
            m = case.microbatches
            # the step ends when its slowest rank does; each rank's own compute fills part of it
            compute = stats.per_rank_median_seconds([r["compute_ns"] for r in results], k)
            bubbles = [float(1 - m * c / step_s) for c in compute]
            row = replace(row, schedule=case.schedule, microbatches=m, layers=o.layers, step_us=step_s * 1e6,
                          tokens_per_s=o.seq * o.batch / step_s,
                          stage_compute_us_per_microbatch=[float(c) * 1e6 for c in compute],
                          bubble_measured=sum(bubbles) / len(bubbles), bubble_per_rank=bubbles,
                          bubble_theory=schedules.bubble_theory(case.schedule, case.pp, m),
                          stages_per_rank=[r["stages"] for r in results])
        self.layer_rows.append(row)
        extra = row.to_json()
        self._append(extra)
        return extra

    def skip(self, case_id: str, reason: str) -> None:
        self.skipped.append({"id": case_id, "reason": reason})

    @functools.cached_property
    def run_dir(self) -> Path:
        """This session's own folder, made on first use (exclusively: a session started in the same
        second gets another), opened by a line that lets readers rebuild the run from cases.jsonl."""
        try:
            path = files.new_run_dir(self.opts.results, self.started.astimezone().strftime("%Y%m%d-%H%M%S"))
        except OSError as exc:
            pytest.exit(f"hccl-bench: cannot create a run folder in {self.opts.results}: {exc.strerror or exc}", returncode=3)
        self.__dict__["run_dir"] = path
        self._append({"session": {"schema": SCHEMA, "datetime": self.started.isoformat(),
                                  "options": asdict(self.opts), "provenance": self.provenance}})
        return path

    @functools.cached_property
    def pool(self) -> GroupPool:
        return GroupPool(self.run_dir / "logs", self.opts.driver_host, keep=2 if self.opts.ab_env else 1)

    def _append(self, obj: dict) -> None:
        """Every case lands in cases.jsonl at once: an interrupted session loses nothing measured;
        a full disk stops the session (exit 3) with what was appended before intact."""
        path = self.run_dir / "cases.jsonl"
        try:
            files.append_line(path, obj)
        except OSError as exc:
            pytest.exit(f"hccl-bench: cannot write {path}: {exc.strerror or exc}; "
                        "the cases finished before are in that file", returncode=3)

    @functools.cached_property
    def provenance(self) -> dict:
        """Collected once (git, MPI library, files): both result files of a session carry it."""
        return provenance.collect()

    def metadata(self) -> dict:
        return {"schema": SCHEMA, "options": asdict(self.opts), "provenance": self.provenance,
                "groups": self.groups, "skipped": self.skipped, "failures": self.failures,
                "overhead": self.overhead, "complete": self.interrupted is None,
                "interrupted": self.interrupted}

    def close(self) -> None:
        if "pool" in self.__dict__:
            self.pool.close_all()
