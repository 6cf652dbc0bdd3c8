"""CANN version parsers on real file samples (tests/data/cann/SOURCES.md says where each is from)."""
from pathlib import Path

import pytest

from harness.provenance import cann_version_from_toolkit, parse_install_info, parse_version_cfg, parse_version_info, relevant_env
from reports.provenance_diff import provenance_diff

DATA = Path(__file__).parent / "data" / "cann"


@pytest.mark.parametrize("name, parser, version", [
    ("version.cfg.8.0.RC3", parse_version_cfg, "8.0.RC3"),
    ("version.cfg.mindie", parse_version_cfg, "8.0.T63"),
    ("version.cfg.6.0.1", parse_version_cfg, "6.0.1"),
    ("ascend_toolkit_install.info.8.1.RC1", parse_install_info, "8.1.RC1"),
    ("ascend_toolkit_install.info.7.0.RC1", parse_install_info, "7.0.RC1"),
    ("toolkit.version.info.8.2.RC1", parse_version_info, "8.2.RC1"),
    ("opp.version.info.8.5.0", parse_version_info, "8.5.0"),
])
def test_parsers_on_real_samples(name, parser, version):
    assert parser((DATA / name).read_text()) == version


def test_parsers_return_none_on_unrelated_text():
    assert parse_version_cfg("# version: 1.0\n") is None
    assert parse_install_info("package_name=x\n") is None
    assert parse_version_info("timestamp=1\n") is None


def test_toolkit_lookup_order(tmp_path):
    assert cann_version_from_toolkit(str(tmp_path)) == {}
    (tmp_path / "aarch64-linux").mkdir()
    source = DATA / "ascend_toolkit_install.info.8.1.RC1"
    (tmp_path / "aarch64-linux" / "ascend_toolkit_install.info").write_text(source.read_text())
    assert cann_version_from_toolkit(str(tmp_path))["cann"] == "8.1.RC1"
    (tmp_path / "version.cfg").write_text((DATA / "version.cfg.8.0.RC3").read_text())
    found = cann_version_from_toolkit(str(tmp_path))
    assert found == {"cann": "8.0.RC3", "source": str(tmp_path / "version.cfg")}


def test_relevant_env_keeps_only_library_switches():
    env = {"HCCL_ALGO": "x", "NCCL_ALGO": "Ring", "MPIR_CVAR_X": "1", "OMPI_MCA_y": "2", "GLOO_SOCKET_IFNAME": "lo",
           "HOME": "/root"}
    assert set(relevant_env(env)) == {"HCCL_ALGO", "NCCL_ALGO", "MPIR_CVAR_X", "OMPI_MCA_y", "GLOO_SOCKET_IFNAME"}


# ---- device drivers, topology and the adapters' variables (recorded where they exist, never made up)

NVRM_LINES = [   # /proc/driver/nvidia/version's first line: proprietary, open and Jetson kernel modules
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.216.03  Thu Apr  3 01:14:19 UTC 2025", "535.216.03"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.142  Release Build  (dvs-builder@U22-I3-AD05-51-5)  "
     "Tue Mar  3 19:14:46 UTC 2026", "580.142"),
    ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  34.1.1  Release Build  (buildbrain@mobile)", "34.1.1"),
]


@pytest.mark.parametrize("line, version", NVRM_LINES)
def test_nvidia_driver_version_from_proc(tmp_path, line, version):
    from collectives.device import nvidia_driver_version
    path = tmp_path / "version"
    path.write_text(line + "\nGCC version:  gcc version 12.3.0\n")
    assert nvidia_driver_version(str(path)) == version
    assert nvidia_driver_version(str(tmp_path / "absent")) is None


def test_driver_versions_are_none_where_the_driver_is_absent():
    import os

    from collectives.device import NVIDIA_DRIVER_FILE
    from harness.provenance import ASCEND_DRIVER_INFO, collect
    drivers = collect([])["drivers"]
    assert set(drivers) == {"nvidia", "cuda_driver", "ascend"}
    if os.path.exists(NVIDIA_DRIVER_FILE):
        assert drivers["nvidia"] and drivers["nvidia"][0].isdigit()
    else:
        assert drivers["nvidia"] is None and drivers["cuda_driver"] is None
    if not os.path.exists(ASCEND_DRIVER_INFO):
        assert drivers["ascend"] is None


def test_topology_runs_only_installed_tools_bounded_in_size_and_time():
    import shutil

    from harness.provenance import TOPOLOGY_COMMANDS, TOPOLOGY_MAX_CHARS, topology
    here = topology()
    assert set(here) == {name for name, argv in TOPOLOGY_COMMANDS.items() if shutil.which(argv[0])}
    found = topology({"absent": ["hccl-bench-no-such-tool"], "two lines": ["printf", "a\\nb"],
                      "long": ["printf", "%s", "x" * (2 * TOPOLOGY_MAX_CHARS)],   # a binary: no interpreter start under load
                      "slow": ["sleep", "5"], "fails": ["false"]}, timeout_s=0.5)
    assert "absent" not in found and found["two lines"] == "a\nb"
    assert found["long"].startswith("x" * TOPOLOGY_MAX_CHARS) and found["long"].endswith("(cut)")
    assert len(found["long"]) < TOPOLOGY_MAX_CHARS + 20
    assert found["slow"] == "(no answer within 0.5 s)" and found["fails"].startswith("(exit 1)")


def test_the_adapters_variables_are_recorded():
    from harness.provenance import adapter_env
    adapters = {"TASK_QUEUE_ENABLE": "2", "P2P_HCCL_BUFFSIZE": "20", "TORCH_NCCL_BLOCKING_WAIT": "1",
                "TORCH_HCCL_ZERO_COPY": "1", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
                "CPU_AFFINITY_CONF": "1", "HCCL_OP_EXPANSION_MODE": "AIV"}
    env = {**adapters, "HCCL_BUFFSIZE": "200", "TORCH_HOME": "/x", "PYTORCH_CUDA_ALLOC_CONF": "y", "HOME": "/root"}
    assert set(relevant_env(env)) == set(adapters) | {"HCCL_BUFFSIZE"}
    assert adapter_env(env) == adapters


def test_cpu_ranks_report_no_device_versions():
    """A CPU rank has no NCCL, CUDA driver, CANN or HCCL to report: nothing is filled in."""
    from collectives.device import Device
    assert Device("cpu").library_versions() == {}


def test_rank_reported_variables_and_topology_show_in_the_diff():
    from harness.provenance import group_info
    from reports.provenance_diff import provenance_diff, run_provenance
    from schema.results import Cell, CollectiveRow, Run, Series
    from schema.run_meta import RunMeta

    def run(queue: str, topo: str, hccl: str) -> Run:
        ranks = [{"host": "n1", "device": "Ascend910B3", "versions": {"hccl": hccl}, "env": {"TASK_QUEUE_ENABLE": queue}}
                 for _ in range(2)]
        row = CollectiveRow(backend="hccl", algo="default", op="all_reduce", bytes=8)
        cell = Cell(Series.of(row), 8, row)
        meta = {"provenance": {"topology": {"npu-smi info": topo}}, "groups": {"g0": {"env": {}, **group_info(ranks)}}}
        return Run("r", {cell.key: cell}, RunMeta.of(meta))

    base, cand = run("1", "NPU 0\nNPU 1", "8.1.RC1"), run("2", "NPU 0\nNPU 1\nNPU 2", "8.2.RC1")
    assert run_provenance(base)["rank_vars"] == {"TASK_QUEUE_ENABLE": "1"}
    diff = dict(provenance_diff([run_provenance(base), run_provenance(cand)]))
    assert diff["rank_vars.TASK_QUEUE_ENABLE"] == ["1", "2"] and diff["ranks.hccl"] == ["8.1.RC1", "8.2.RC1"]
    before, after = diff["topology.npu-smi info"]
    assert before.startswith("2 lines, sha256 ") and after.startswith("3 lines, sha256 ")
    assert "topology.npu-smi info" not in dict(provenance_diff([run_provenance(base), run_provenance(base)]))


def test_a_value_absent_on_this_machine_is_no_change_from_a_run_that_never_recorded_it():
    """An older run lacks `drivers`; a newer one records None where there is no driver: nothing changed."""
    old = {"torch": "2.13.0"}
    new = {"torch": "2.13.0", "drivers": {"ascend": None, "nvidia": None}}
    assert provenance_diff([old, new]) == []
    assert provenance_diff([old, {**new, "drivers": {"nvidia": "580.1"}}]) == [("drivers.nvidia", ["-", "580.1"])]
