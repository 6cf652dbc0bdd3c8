"""The import graph has no cycle: not of files (a package's __init__ counts as a file, so a parent
package <-> child module cycle is one, which import-linter's acyclic_siblings does not see), and not
of packages at any depth. Imports inside functions count: they close a cycle all the same; so do
imports under TYPE_CHECKING (a type-only cycle is a layering one: lint-imports counts them too, pyproject.toml)."""
from __future__ import annotations

from pathlib import Path

import grimp
import pytest

# every package of the checkout but the tests: a new one is checked from the day it lands
ROOTS = sorted(p.parent.name for p in Path(__file__).resolve().parent.parent.glob("*/__init__.py") if p.parent.name != "tests")


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    graph = grimp.build_graph(*ROOTS, include_external_packages=False, exclude_type_checking_imports=False, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(part) > 1:
                        found.append(sorted(part))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def squashed(edges: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """The graph of packages `depth` names deep: each module counted as its ancestor at that depth."""
    def at(m: str) -> str:
        return ".".join(m.split(".")[:depth])
    out: dict[str, set[str]] = {}
    for src, dsts in edges.items():
        out.setdefault(at(src), set()).update(at(d) for d in dsts if at(d) != at(src))
    return out


def test_no_cycle_of_modules_parent_and_child_included(edges):
    assert cycles(edges) == []


def test_no_cycle_of_packages_at_any_depth(edges):
    deepest = max(m.count(".") for m in edges) + 1
    assert {d: cycles(squashed(edges, d)) for d in range(1, deepest)} == {d: [] for d in range(1, deepest)}


def test_the_check_sees_a_parent_child_cycle():
    """A package's __init__ importing its child while the child imports the package (the cycle
    collectives.backends <-> backends.mpich had, through a function-level import)."""
    assert cycles({"p": {"p.child"}, "p.child": {"p"}, "p.other": {"p"}}) == [["p", "p.child"]]
    assert cycles(squashed({"a.x": {"b.y"}, "b.y": {"a.z"}, "a.z": set()}, 1)) == [["a", "b"]]
