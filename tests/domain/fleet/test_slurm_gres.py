"""A node's atoms as Slurm GRES: gres.conf lines and the slurm.conf node line (`slurm_gres`)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from better_compute.bcd.node_tree import ci_cap, driver_mig_minors, gi_cap, mig_minor
from better_compute.domain.fleet.atoms import Atom, derive_gpu_atoms
from better_compute.domain.fleet.inventory import MigInstance
from better_compute.domain.fleet.pools import PoolSharing
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.fleet.slurm_gres import ci_cap_minor, gi_cap_minor, node_gres, slurm_type
from better_compute.domain.kernel.errors import InvalidState

NODE = "gpu-a-1"
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _gpu(index: int, *, mig: tuple[MigInstance, ...] | None = None, model: str | None = "A100-80GB") -> Gpu:
    return Gpu(
        id=f"GPU-{index:04d}",
        node_id=NODE,
        index=index,
        product="NVIDIA A100-SXM4-80GB",
        model=model,
        memory_mib=81920,
        numa_node=0,
        nvlink_peers=(),
        healthy=True,
        present=True,
        mig_mode_current=mig is not None,
        mig_mode_pending=mig is not None,
        mig_instances=mig or (),
        updated_at=AT,
    )


def _atoms(gpu: Gpu, pool: PoolSharing | None = None) -> list[Atom]:
    return derive_gpu_atoms(gpu.report(), NODE, pool, gpu.model)


def _inst(profile: str, gi: int, ci: int, start: int, size: int) -> MigInstance:
    return MigInstance(profile, gi, ci, start, size, f"MIG-{gi}-{ci}")


def test_whole_gpus_are_gpus_of_their_model_type() -> None:
    gpus = [_gpu(0), _gpu(1)]
    out = node_gres(NODE, gpus, [a for g in gpus for a in _atoms(g)])
    assert out.gres_conf.splitlines()[1:] == [
        "NodeName=gpu-a-1 AutoDetect=off",
        "NodeName=gpu-a-1 Name=gpu Type=a100_80gb File=/dev/nvidia0",
        "NodeName=gpu-a-1 Name=gpu Type=a100_80gb File=/dev/nvidia1",
    ]
    assert out.gres_conf.startswith("# gpu-a-1: ")
    assert out.node_line == "NodeName=gpu-a-1 Gres=gpu:a100_80gb:2"


def test_a_mig_cut_gpu_gives_each_instance_with_its_capability_files() -> None:
    mig = (_inst("3g.40gb", 2, 0, 0, 4), _inst("2g.20gb", 3, 0, 4, 2), _inst("1g.10gb", 9, 0, 6, 1))
    gpus = [_gpu(0), _gpu(1, mig=mig)]
    out = node_gres(NODE, gpus, [a for g in gpus for a in _atoms(g)])
    lines = out.gres_conf.splitlines()
    assert lines[3:] == [
        "NodeName=gpu-a-1 Name=gpu Type=3g.40gb MultipleFiles="
        f"/dev/nvidia1,/dev/nvidia-caps/nvidia-cap{gi_cap_minor(1, 2)},/dev/nvidia-caps/nvidia-cap{ci_cap_minor(1, 2, 0)}",
        "NodeName=gpu-a-1 Name=gpu Type=2g.20gb MultipleFiles="
        f"/dev/nvidia1,/dev/nvidia-caps/nvidia-cap{gi_cap_minor(1, 3)},/dev/nvidia-caps/nvidia-cap{ci_cap_minor(1, 3, 0)}",
        "NodeName=gpu-a-1 Name=gpu Type=1g.10gb MultipleFiles="
        f"/dev/nvidia1,/dev/nvidia-caps/nvidia-cap{gi_cap_minor(1, 9)},/dev/nvidia-caps/nvidia-cap{ci_cap_minor(1, 9, 0)}",
    ]
    assert out.node_line == "NodeName=gpu-a-1 Gres=gpu:a100_80gb:1,gpu:3g.40gb:1,gpu:2g.20gb:1,gpu:1g.10gb:1"


def test_capability_minors_are_the_drivers_table() -> None:
    """The minors computed here are those the driver's mig-minors table (as bcd writes it) names."""
    table = driver_mig_minors()
    for gpu, gi, ci in [(0, 0, 0), (1, 2, 0), (3, 14, 7), (31, 14, 7), (7, 5, 3)]:
        assert gi_cap_minor(gpu, gi) == mig_minor(table, gi_cap(gpu, gi))
        assert ci_cap_minor(gpu, gi, ci) == mig_minor(table, ci_cap(gpu, gi, ci))


def test_a_slot_pool_gives_shards_on_the_gpu() -> None:
    gpus = [_gpu(0), _gpu(1)]
    pool = PoolSharing("pool-ts", "timeslice", replicas=4)
    out = node_gres(NODE, gpus, [a for g in gpus for a in _atoms(g, pool)])
    assert out.gres_conf.splitlines()[2:] == [
        "NodeName=gpu-a-1 Name=gpu Type=a100_80gb File=/dev/nvidia0",
        "NodeName=gpu-a-1 Name=shard Count=4 File=/dev/nvidia0",
        "NodeName=gpu-a-1 Name=gpu Type=a100_80gb File=/dev/nvidia1",
        "NodeName=gpu-a-1 Name=shard Count=4 File=/dev/nvidia1",
    ]
    assert out.node_line == "NodeName=gpu-a-1 Gres=gpu:a100_80gb:2,shard:8"


def test_type_names_are_sanitized() -> None:
    assert slurm_type("H100-80GB") == "h100_80gb"
    assert slurm_type("1g.10gb+me") == "1g.10gb_me"
    assert slurm_type("NVIDIA RTX PRO 6000 Blackwell") == "nvidia_rtx_pro_6000_blackwell"
    gpu = _gpu(0, model=None)
    out = node_gres(NODE, [gpu], _atoms(gpu))
    assert out.node_line == "NodeName=gpu-a-1 Gres=gpu:nvidia_a100_sxm4_80gb:1"
    mig = _gpu(0, mig=(_inst("1g.10gb+me", 1, 0, 0, 1),))
    assert "Type=1g.10gb_me " in node_gres(NODE, [mig], _atoms(mig)).gres_conf


def test_a_node_without_gpus_has_no_gres() -> None:
    out = node_gres(NODE, [], [])
    assert out.node_line == "NodeName=gpu-a-1"
    assert out.gres_conf.splitlines()[1:] == ["NodeName=gpu-a-1 AutoDetect=off"]


def test_gone_gpus_and_atoms_are_left_out() -> None:
    gone = dataclasses.replace(_gpu(1), present=False)
    atoms = _atoms(_gpu(0)) + [dataclasses.replace(a, present=False) for a in _atoms(gone)]
    assert node_gres(NODE, [_gpu(0), gone], atoms).node_line == "NodeName=gpu-a-1 Gres=gpu:a100_80gb:1"


def _refused(gpus: list[Gpu], atoms: list[Atom], node: str = NODE) -> str:
    with pytest.raises(InvalidState) as e:
        node_gres(node, gpus, atoms)
    assert e.value.details["reason"] == "not_expressible"
    return e.value.message


def test_refuses_a_gpu_waiting_for_its_mig_reset() -> None:
    gpu = dataclasses.replace(_gpu(0), mig_mode_pending=True)
    assert "MIG mode change waits for a reset" in _refused([gpu], _atoms(gpu))


def test_refuses_ids_beyond_the_drivers_table() -> None:
    gpu = _gpu(0, mig=(_inst("1g.10gb", 15, 0, 0, 1),))
    assert "outside the driver's capability table" in _refused([gpu], _atoms(gpu))
    far = dataclasses.replace(_gpu(0), index=32)
    assert "index is outside 0-31" in _refused([far], _atoms(far))


def test_refuses_inconsistent_atoms() -> None:
    mig_gpu = _gpu(0, mig=(_inst("3g.40gb", 2, 0, 0, 4),))
    whole = _gpu(0)
    assert "not in MIG mode" in _refused([whole], _atoms(mig_gpu))
    slots = _atoms(whole, PoolSharing("p", "timeslice", replicas=4))
    assert "do not agree" in _refused(
        [whole],
        [*slots[:-1], dataclasses.replace(slots[-1], attributes={**slots[-1].attributes, "slots": 5})],
    )
    assert "not 0-3" in _refused([whole], slots[:-1])
    assert "same index" in _refused([_gpu(0), dataclasses.replace(_gpu(1), index=0)], [])
    other = dataclasses.replace(_gpu(1), id="GPU-elsewhere")
    assert "of no GPU the node reports" in _refused([whole], _atoms(whole) + _atoms(other))


def test_refuses_a_node_name_slurm_would_parse() -> None:
    assert "host names" in _refused([], [], node="gpu a,1")


def test_a_nodes_own_report_gives_the_lines_bcd_writes() -> None:
    """`report_gres` (bcd's `--slurm-gres-conf`) derives the atoms as the server does: a MIG GPU's
    instances, a time-sliced GPU's slots as shards, a whole GPU by its catalog model."""
    from better_compute.domain.fleet.inventory import GpuReport, MigInstance, NodeReport
    from better_compute.domain.fleet.pools import PoolSharing
    from better_compute.domain.fleet.slurm_gres import report_gres

    mig = GpuReport(
        uuid="GPU-a",
        product="NVIDIA A100-SXM4-80GB",
        memory_mib=81920,
        index=0,
        mig_mode_current=True,
        mig_mode_pending=True,
        mig_instances=(MigInstance("3g.40gb", 1, 0, 0, 4, "MIG-1"),),
    )
    whole = GpuReport(uuid="GPU-b", product="NVIDIA A100-SXM4-80GB", memory_mib=81920, index=1)
    report = NodeReport(node="n1", gpus=(mig, whole))
    lines = report_gres(report, None, lambda product: "A100-80GB")
    assert lines.node_line == "NodeName=n1 Gres=gpu:3g.40gb:1,gpu:a100_80gb:1"
    assert "NodeName=n1 Name=gpu Type=a100_80gb File=/dev/nvidia1" in lines.gres_conf.splitlines()
    shared = report_gres(
        NodeReport(node="n1", gpus=(whole,)), PoolSharing("p", "timeslice", 4), lambda product: None
    )
    assert shared.node_line == "NodeName=n1 Gres=gpu:nvidia_a100_sxm4_80gb:1,shard:4"


def test_the_accounting_setting_names_gpu_each_type_and_shard_once() -> None:
    from better_compute.domain.fleet.slurm_gres import accounting_tres

    line = "NodeName=gpu-a-1 Gres=gpu:a100_80gb:2,gpu:3g.40gb:1,gpu:2g.20gb:1,shard:4"
    assert accounting_tres(line) == "gres/gpu,gres/gpu:a100_80gb,gres/gpu:3g.40gb,gres/gpu:2g.20gb,gres/shard"
    assert accounting_tres("NodeName=n") == "gres/gpu"
