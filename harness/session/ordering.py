"""Which worker group, launch and sweep position each collected item belongs to, and the run order
that follows: a group costs seconds to start, so cases sharing one run back to back."""
from __future__ import annotations

import kinds
from schema.group_key import GroupKey

CASE_FIXTURES = tuple(kind.fixture for kind in kinds.KINDS)


def _params(item) -> dict:
    return getattr(getattr(item, "callspec", None), "params", {})


def _case(item):
    """The item's case of whichever kind (None outside the sweep)."""
    return next((_params(item)[n] for n in CASE_FIXTURES if n in _params(item)), None)


def _group(item) -> GroupKey | None:
    return getattr(_case(item), "group", None)


def launch_of(item) -> int:
    return getattr(_group(item), "launch", 0)


def base_id(item) -> str | None:
    """The item's case id without its launch and side ends (what --cases names); None outside the sweep."""
    from kinds.base import launch_suffix
    case = _case(item)
    if case is None:
        return None
    end = launch_suffix(getattr(case, "launch", 0), getattr(case, "side", ""))
    return case.id[:-len(end)] if end and case.id.endswith(end) else case.id


def where_of(item) -> tuple | None:
    """(backend, op or bench, side) for the progress lines; None for an item outside the sweep."""
    case = _case(item)
    if case is None or case.group is None:   # a case skipped at collection has no group
        return None
    return case.group.backend, kinds.of_case(case).topic(case), case.side and f"side {case.side}"


def sort(items: list) -> None:
    """Launch after launch (a sequential A/B looks between them), groups kept together inside one;
    with --ab-env the two sides' groups count as one slot, keeping each A/B pair adjacent."""
    def slot(item):
        key = _group(item)
        return key and key.slot()

    order: dict = {}
    for item in items:
        key = slot(item)
        if key is not None and key not in order:
            order[key] = len(order)
    items.sort(key=lambda it: (launch_of(it), order.get(slot(it), len(order))))


def skipped(items: list, repeat: int) -> list[tuple[str, str]]:
    """(case id, reason) of each case skipped at collection, for results.json; --top-up launches' are left out."""
    return [(case.id, case.skip) for item in items for case in _params(item).values()
            if getattr(case, "skip", "") and getattr(case, "launch", 0) < repeat]
