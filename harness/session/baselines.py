"""Stored reference results, keyed by platform (device, hosts x ranks per host, backends) and named
by software stack (``cann-8.0.RC3``, ``nccl-2.21``...). Layout: baselines/<platform>/<name>/."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from harness import files
from reports.result_files import load
from schema.results import ResultError
from schema.run_meta import RunMeta

ROOT = Path(__file__).resolve().parents[2] / "baselines"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def platform_key(meta: RunMeta, backends: list[str]) -> str:
    """e.g. 'amd-epyc-1x2-gloo+mpi': what a baseline is only comparable within."""
    groups = list(meta.groups.values())
    device = next((d for g in groups for d in g.get("devices", [])), "unknown-device")
    hosts: dict = max((g.get("hosts", {}) for g in groups), key=len, default={})
    per_host = max(hosts.values(), default=0)
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")[:40] or "device"
    return f"{slug}-{len(hosts)}x{per_host}-{'+'.join(sorted(backends))}"


def save(result: str, name: str, root: Path = ROOT) -> Path:
    if not _NAME.match(name):
        raise ResultError(f"baseline name {name!r}: use letters, digits and . _ + - (e.g. cann-8.0.RC3)")
    run = load(result)
    if not run.complete:
        raise ResultError(f"{result} is an incomplete run ({run.meta.interrupted or 'ended early'}): "
                          "a baseline must be a whole run")
    target = root / platform_key(run.meta, run.backends()) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        target.mkdir()
    except FileExistsError:
        raise ResultError(f"baseline {target.relative_to(root)} exists: pick another name or remove it") from None
    files.write_atomic(target / "results.json", Path(run.path).read_text())
    prov = run.meta.provenance
    # meta.json last: a baseline is listed only once its results are whole
    files.write_atomic(target / "meta.json", json.dumps({
        "name": name, "saved": time.strftime("%Y-%m-%dT%H:%M:%S"), "source": run.path, "cells": len(run.cells),
        "platform": target.parent.name, "cann": prov.get("cann", {}).get("cann"), "mpi_library": prov.get("mpi_library"),
        "torch": prov.get("packages", {}).get("torch"), "git": prov.get("git", {})}, indent=1))
    return target


def entries(root: Path = ROOT) -> list[dict]:
    out = [{**json.loads(meta.read_text()), "path": str(meta.parent)} for meta in sorted(root.glob("*/*/meta.json"))]
    return sorted(out, key=lambda e: e["saved"])


def find(name: str, root: Path = ROOT) -> dict:
    matches = [e for e in entries(root) if e["name"] == name or e["path"].endswith(name)]
    if not matches:
        raise ResultError(f"no stored baseline named {name!r} (hccl-bench baseline list shows them)")
    return matches[-1]


def auto(result: str, root: Path = ROOT) -> str:
    """The most recently saved baseline of the same platform as `result`."""
    run = load(result)
    key = platform_key(run.meta, run.backends())
    same = [e for e in entries(root) if e["platform"] == key]
    if not same:
        raise ResultError(f"no stored baseline for platform {key} (save one: hccl-bench baseline save RESULT --name NAME)")
    return str(Path(same[-1]["path"]) / "results.json")
