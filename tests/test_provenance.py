"""CANN version parsers on real file samples (tests/data/cann/SOURCES.md says where each is from)."""
from pathlib import Path

import pytest

from harness.provenance import cann_version_from_toolkit, parse_install_info, parse_version_cfg, parse_version_info, relevant_env

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
