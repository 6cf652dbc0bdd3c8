"""The op and backend registries: what every op module and backend declares, and that the rest
of the product reads the op set and backend behaviour from them."""
import pytest

from collectives import algorithms
from collectives.backends import BACKENDS, algo_label, create, forms, info
from collectives.ops import ITEMSIZE, OPS, Op, by_log_name
from kinds.collective import build
from kinds.options import Options
from kinds.overlap import OPS_WITH_ASYNC


@pytest.mark.parametrize("name", list(OPS))
def test_every_op_module_declares_a_call_and_forms_for_each_family(name):
    op = OPS[name]
    assert isinstance(op, Op) and op.name == name
    for family in ("torch", "mpi"):
        assert callable(op.calls[family]) and op.forms[family] <= {True, False} and op.forms[family]
    assert op.bus_factor(1) == 0.0 or op.bus_factor(1) == 1.0


def test_log_names_map_other_tools_names_back():
    assert by_log_name("all_reduce") == "all_reduce" and by_log_name("reducescatter") == "reduce_scatter"
    assert by_log_name("AllGather") == "all_gather" and by_log_name("sendrecv") == "sendrecv"
    assert by_log_name("All2All", inspector=True) == "all_to_all" and by_log_name("alltoall", inspector=True) is None
    assert by_log_name("gather") is None


def test_one_itemsize_table():
    from reports import importers
    assert not hasattr(importers, "ITEMSIZE") or importers.ITEMSIZE is ITEMSIZE
    assert ITEMSIZE["bfloat16"] == 2 and ITEMSIZE["uint64"] == 8


def test_cases_take_the_op_set_and_async_ops_from_the_registry():
    opts = Options(backends=["gloo"], nproc=2, sizes=[1024], dtypes=["float32"], redops=["sum"])
    assert list(dict.fromkeys(c.op for c in build(opts))) == list(OPS)
    assert set(OPS_WITH_ASYNC) == set(info("gloo").async_ops) == {n for n, o in OPS.items() if o.has_async}


def test_backends_declare_what_the_driver_asks():
    names = list(BACKENDS)   # CPU backends first; a new backend module adds its own name
    assert names[:2] == ["gloo", "mpi"] and names[-2:] == ["nccl", "hccl"]
    assert info("mpi").launcher == "mpiexec" and info("gloo").launcher == "spawn"
    assert info("mpi").layers and not info("openmpi").layers and info("gloo").layers and info("mpi").numpy_buffers
    assert not info("mpi").dtensor and info("gloo").dtensor   # torch.distributed over MPICH: manual TP only
    assert info("nccl").one_rank_per_device and not info("gloo").one_rank_per_device
    assert forms("mpi")["reduce_scatter"] == {False} and forms("gloo")["all_gather"] == {True, False}
    assert algo_label("hccl", "ring") == "ring (requested)" and algo_label("nccl", "ring") == "ring"
    for name, b in BACKENDS.items():
        assert b.name == name and b.family in ("torch", "mpi") and b.dtypes


def test_algorithm_switch_is_declared_by_the_backend():
    assert algorithms.resolve("mpi", "ring", "all_reduce", "openmpi")["OMPI_MCA_coll_tuned_allreduce_algorithm"] == "4"
    assert "gloo has no algorithm switch" in algorithms.resolve("gloo", "ring", "all_reduce").reason
    assert algorithms.native_name("hccl", "tree") == "H-D_R" and algorithms.native_name("mpi", "tree") == ""


def test_an_unknown_backend_name_is_refused():
    with pytest.raises(KeyError):
        create("nope", 0, 1, 0)
