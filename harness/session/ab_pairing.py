"""Interleaved A/B (--ab-env, --ab-source): both sides of a case are measured together, single
rounds alternating ABBA between the two live groups, so a pair of rounds is milliseconds apart.
The pair's first pytest item measures both; the second item takes what was left for it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from schema.wire import Spec, Step


class PartnerFailed(Exception):
    """The other side of an A/B pair failed, so this side has no result either."""


class ABPairing:
    def __init__(self, call: Callable, run: Callable):
        self.call = call    # (group, spec, label) -> results: one request, failing the case on error
        self.run = run      # (group, spec, label) -> (results, group info): a request that ends a case
        self.waiting: dict[str, object] = {}   # case id -> the partner's (results, info) or its failure

    def measure(self, case, label: Callable, begin: Spec, rounds: int) -> tuple[list[dict], dict]:
        measured = self.waiting.pop(case.id, None)
        if measured is None:
            partner = replace(case, side="B" if case.side == "A" else "A", group=case.partner, partner=case.group)
            try:
                measured, self.waiting[partner.id] = self._both((case, partner), label, begin, rounds)
            except BaseException as exc:
                self.waiting[partner.id] = exc
                raise
        if isinstance(measured, BaseException):
            raise PartnerFailed(str(measured).splitlines()[0] if str(measured) else type(measured).__name__)
        return measured  # type: ignore[return-value]

    def _both(self, pair: tuple, label: Callable, begin: Spec, rounds: int) -> tuple:
        """Prepare the case in both groups, alternate single rounds, then collect each side."""
        for c in pair:
            self.call(c.group, begin, label(c))
        for r in range(rounds):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                self.call(pair[i].group, Step(kind="round"), label(pair[i]))
        return tuple(self.run(c.group, Step(kind="end"), label(c)) for c in pair)
