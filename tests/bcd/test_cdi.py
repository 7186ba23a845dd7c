"""CDI spec files for allocations: one device per allocation that carries, on its own, what its
container needs to reach exactly its atoms (device nodes, the driver, the environment, MPS mounts),
at the lowest `cdiVersion` its fields need, valid by the CDI spec's schema, written whole, written
again when what reaches the container changed, and removed once."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from typer.testing import CliRunner

from better_compute.bcd import cdi
from better_compute.bcd.devices import DevicesConverger
from better_compute.bcd.logs import Log
from better_compute.bcd.mps import MpsPaths
from better_compute.bcd.node_tree import MIG_MINORS, NodeTree, SimulatedDriver, simulated
from better_compute.entrypoints.bcd import bcd_app
from tests.bcd.handover import (
    assignment,
    edits,
    env_of,
    mig_atom,
    mig_node,
    mounted,
    mps_node,
    node_paths,
    node_spec,
    slot_atom,
    whole_atom,
    whole_node,
    written,
)

SCHEMA = json.loads((Path(__file__).parent / "cdi_spec.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema_rs.Draft7Validator(SCHEMA)
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
LIB = "/usr/lib/x86_64-linux-gnu"


def converger(tmp: Path, root: Path | None = None, **kw: Any) -> DevicesConverger:
    tree = NodeTree(root) if root is not None else simulated(tmp / "node-root")
    return DevicesConverger(tmp / "cdi", tmp / "env", node=tree, **kw)


# -- the spec's shape ------------------------------------------------------------------------------


def test_a_mig_allocation_gets_its_gpu_and_its_two_capabilities_and_no_other_instance(tmp_path: Path) -> None:
    """A MIG instance is its parent GPU's node plus the access capabilities of its GPU instance and
    its compute instance, their minors read from the node's mig-minors (`gpu<minor>/gi<id>/access`,
    `gpu<minor>/gi<id>/ci<id>/access`): what nvidia-ctk gives a MIG device."""
    fake = mig_node()
    gpu = fake.list_gpus()[1]  # minor 1
    gi = gpu.instances[2]
    devices = converger(tmp_path)
    done = devices.converge(node_spec(fake, "mig", assignment("res-a", mig_atom(gpu, gi))), fake.list_gpus())
    assert [r["binding"] for r in done.reports] == ["bound"]
    spec = written(tmp_path / "cdi", "res-a")
    VALIDATOR.validate(spec)
    assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "better-compute.io/gpu"
    found = edits(tmp_path / "cdi", "res-a")
    # The driver's table: 2 lines, then 135 per GPU minor (15 GIs of an access line and 8 CIs).
    gi_minor = 3 + 135 * 1 + 9 * gi.gi_id
    ci_minor = gi_minor + 1 + gi.compute_instances[0].ci_id
    assert node_paths(found) == [
        "/dev/nvidia1",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor}",
        f"/dev/nvidia-caps/nvidia-cap{ci_minor}",
        *CONTROL,
    ]
    root = tmp_path / "node-root"
    assert [n["hostPath"] for n in found["deviceNodes"]] == [f"{root}{p}" for p in node_paths(found)]
    env = env_of(found)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["BC_DEVICE_UUIDS"] == gi.compute_instances[0].uuid
    assert mounted(found)[f"{LIB}/libcuda.so.1"] == f"{root}{LIB}/libcuda.so.550.54.15"
    assert all(m["options"][0] == "ro" for m in found["mounts"])


def test_a_whole_gpu_gets_its_own_node_and_not_the_other_gpus(tmp_path: Path) -> None:
    fake = whole_node()
    first, second = fake.list_gpus()[:2]
    devices = converger(tmp_path)
    spec = node_spec(fake, "exclusive", assignment("res-a", whole_atom(second)))
    assert devices.converge(spec, fake.list_gpus()).settled
    found = edits(tmp_path / "cdi", "res-a")
    assert node_paths(found) == ["/dev/nvidia1", *CONTROL]
    assert env_of(found)["BC_DEVICE_UUIDS"] == second.uuid and first.uuid not in json.dumps(found)
    VALIDATOR.validate(written(tmp_path / "cdi", "res-a"))


def test_a_node_the_host_lacks_is_named_by_its_numbers_and_one_it_has_is_left_to_the_runtime(
    tmp_path: Path,
) -> None:
    """Where the host has the device node, the spec leaves its type and numbers for the runtime to
    read from it, as nvidia-ctk does; where it does not (the driver makes caps nodes when first
    asked), the runtime is told them, majors from the node's /proc/devices."""
    root = simulated(tmp_path / "root", SimulatedDriver(majors={"nvidia-uvm": 236, "nvidia-caps": 237})).root
    (root / "dev").mkdir()
    try:
        os.mknod(root / "dev/nvidiactl", stat.S_IFCHR | 0o666, os.makedev(195, 255))
    except PermissionError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("making a device node needs root (CAP_MKNOD)")
    fake = mig_node()
    gpu = fake.list_gpus()[0]
    devices = converger(tmp_path, root)
    devices.converge(
        node_spec(fake, "mig", assignment("res-a", mig_atom(gpu, gpu.instances[0]))), fake.list_gpus()
    )
    nodes = {n["path"]: n for n in edits(tmp_path / "cdi", "res-a")["deviceNodes"]}
    assert nodes["/dev/nvidiactl"] == {"path": "/dev/nvidiactl", "hostPath": f"{root}/dev/nvidiactl"}
    assert {k: nodes["/dev/nvidia0"][k] for k in ("type", "major", "minor")} == {
        "type": "c",
        "major": 195,
        "minor": 0,
    }
    assert (nodes["/dev/nvidia-uvm"]["major"], nodes["/dev/nvidia-uvm"]["minor"]) == (236, 0)
    assert (nodes["/dev/nvidia-uvm-tools"]["major"], nodes["/dev/nvidia-uvm-tools"]["minor"]) == (236, 1)
    caps = [n for p, n in nodes.items() if p.startswith("/dev/nvidia-caps/")]
    assert [n["major"] for n in caps] == [237, 237]
    assert [f"/dev/nvidia-caps/nvidia-cap{n['minor']}" for n in caps] == [n["path"] for n in caps]


def test_an_mps_slot_mounts_the_daemons_pipe_and_shared_memory(tmp_path: Path) -> None:
    """An MPS client reaches its daemon through the pipe directory (mounted where
    `CUDA_MPS_PIPE_DIRECTORY` names it) and shares memory with it through the daemon's `/dev/shm`."""
    fake = mps_node(replicas=4)
    gpu = fake.list_gpus()[0]
    paths = MpsPaths.under(tmp_path / "mps")
    devices = converger(tmp_path, mps=paths)
    spec = node_spec(fake, "mps", assignment("res-a", slot_atom(gpu, 1)), replicas=4)
    assert devices.converge(spec, fake.list_gpus()).settled
    found = edits(tmp_path / "cdi", "res-a")
    env = env_of(found)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(paths.pipe_directory)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert mounted(found)[str(paths.pipe_directory)] == str(paths.pipe_directory)
    assert mounted(found)["/dev/shm"] == str(paths.shm_directory)
    assert paths.pipe_directory.is_dir() and paths.shm_directory.is_dir()
    assert node_paths(found) == ["/dev/nvidia0", *CONTROL]
    VALIDATOR.validate(written(tmp_path / "cdi", "res-a"))


def test_a_timeslice_slot_has_no_mps_mounts(tmp_path: Path) -> None:
    fake = mps_node()
    gpu = fake.list_gpus()[0]
    devices = converger(tmp_path, mps=MpsPaths.under(tmp_path / "mps"))
    devices.converge(
        node_spec(fake, "timeslice", assignment("res-a", slot_atom(gpu, 0)), replicas=4), fake.list_gpus()
    )
    found = edits(tmp_path / "cdi", "res-a")
    assert "/dev/shm" not in mounted(found) and "CUDA_MPS_PIPE_DIRECTORY" not in env_of(found)


def test_the_assignments_env_is_kept_but_cannot_undo_void_or_the_uuids(tmp_path: Path) -> None:
    fake = whole_node()
    gpu = fake.list_gpus()[0]
    devices = converger(tmp_path)
    env = {"NVIDIA_VISIBLE_DEVICES": "all", "BC_DEVICE_UUIDS": "GPU-other", "BC_TENANT": "acme"}
    devices.converge(
        node_spec(fake, "exclusive", assignment("res-a", whole_atom(gpu), env=env)), fake.list_gpus()
    )
    found = env_of(edits(tmp_path / "cdi", "res-a"))
    assert found == {"BC_DEVICE_UUIDS": gpu.uuid, "BC_TENANT": "acme", "NVIDIA_VISIBLE_DEVICES": "void"}
    # The env file is for a runtime without CDI (the NVIDIA runtime's legacy mode): there the
    # variable names the devices, which that runtime makes visible itself.
    text = (tmp_path / "env" / "res-a.env").read_text(encoding="utf-8")
    assert text == f"BC_DEVICE_UUIDS={gpu.uuid}\nBC_TENANT=acme\nNVIDIA_VISIBLE_DEVICES={gpu.uuid}\n"


# -- what the node cannot name ---------------------------------------------------------------------


def test_a_gpu_with_no_minor_is_device_missing_never_a_spec_without_its_node(tmp_path: Path) -> None:
    fake = whole_node()
    gpus = [dataclasses.replace(g, minor_number=None) for g in fake.list_gpus()]
    devices = converger(tmp_path)
    done = devices.converge(node_spec(fake, "exclusive", assignment("res-a", whole_atom(gpus[0]))), gpus)
    assert [(r["binding"], r["detail"]) for r in done.reports] == [
        (
            "device-missing",
            f"the node cannot hand over atoms {whole_atom(gpus[0])}: GPU {gpus[0].uuid} has no device"
            " minor (NVML gave none): no /dev/nvidia<minor>",
        )
    ]
    assert not done.settled and not cdi.spec_path(tmp_path / "cdi", "res-a").exists()
    assert devices.converge(
        node_spec(fake, "exclusive", assignment("res-a", whole_atom(gpus[0]))), fake.list_gpus()
    ).settled


def test_a_mig_instance_without_its_mig_minors_line_is_device_missing_until_the_node_has_it(
    tmp_path: Path,
) -> None:
    fake = mig_node()
    gpu = fake.list_gpus()[0]
    gi = gpu.instances[0]
    tree = simulated(tmp_path / "node-root")
    table = tree.host_path(MIG_MINORS)
    full = table.read_text(encoding="utf-8")
    table.write_text(
        "".join(line for line in full.splitlines(keepends=True) if f"gpu0/gi{gi.gi_id}/ci" not in line)
    )
    devices = converger(tmp_path, tree.root)
    spec = node_spec(fake, "mig", assignment("res-a", mig_atom(gpu, gi)))
    done = devices.converge(spec, fake.list_gpus())
    ((binding, detail),) = [(r["binding"], r["detail"]) for r in done.reports]
    assert binding == "device-missing"
    assert detail.endswith(f"{table} has no line for gpu0/gi{gi.gi_id}/ci0/access")
    assert not cdi.spec_path(tmp_path / "cdi", "res-a").exists()
    table.unlink()
    done = devices.converge(spec, fake.list_gpus())
    assert "mig-minors is missing" in done.reports[0]["detail"]
    table.write_text(full)
    assert [r["binding"] for r in devices.converge(spec, fake.list_gpus()).reports] == ["bound"]


def test_a_node_without_a_driver_hands_nothing_over(tmp_path: Path) -> None:
    """No device numbers for nodes the host lacks, no driver version, no library of it: a container
    would get device nodes it cannot open, or cannot use."""
    fake = whole_node()
    gpu = fake.list_gpus()[0]
    root = tmp_path / "bare"
    root.mkdir()
    devices = converger(tmp_path, root)
    spec = node_spec(fake, "exclusive", assignment("res-a", whole_atom(gpu)))
    done = devices.converge(spec, fake.list_gpus())
    assert done.reports[0]["detail"].endswith(
        f"{root}/dev/nvidia-uvm does not exist and {root}/proc/devices names no nvidia-uvm major"
    )
    (root / "proc").mkdir()
    (root / "proc/devices").write_text("Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n")
    done = devices.converge(spec, fake.list_gpus())
    assert f"{root}/proc/driver/nvidia/version is missing" in done.reports[0]["detail"]
    simulated(root)
    for lib in (root / LIB.lstrip("/")).iterdir():
        lib.unlink()
    done = devices.converge(spec, fake.list_gpus())
    assert "no library of NVIDIA driver 550.54.15" in done.reports[0]["detail"]
    assert not cdi.spec_path(tmp_path / "cdi", "res-a").exists()


def test_a_bound_instance_the_node_can_no_longer_name_is_withdrawn(tmp_path: Path) -> None:
    """Its own instance has no mig-minors line now: a reason that is the allocation's, not the
    node's, so its spec goes (another allocation's stays)."""
    fake = mig_node()
    gpu = fake.list_gpus()[0]
    gi, other = gpu.instances[0], gpu.instances[1]
    tree = simulated(tmp_path / "node-root")
    devices = converger(tmp_path, tree.root)
    spec = node_spec(
        fake,
        "mig",
        assignment("res-a", mig_atom(gpu, gi)),
        assignment("res-b", mig_atom(gpu, other)),
    )
    assert devices.converge(spec, fake.list_gpus()).settled
    table = tree.host_path(MIG_MINORS)
    table.write_text(
        "".join(
            line
            for line in table.read_text(encoding="utf-8").splitlines(keepends=True)
            if f"gpu0/gi{gi.gi_id}/" not in line
        )
    )
    done = devices.converge(spec, fake.list_gpus())
    assert [(r["allocationId"], r["binding"]) for r in done.reports] == [("res-a", "device-missing")]
    assert not done.settled
    assert not cdi.spec_path(tmp_path / "cdi", "res-a").exists()
    assert not (tmp_path / "env" / "res-a.env").exists()
    assert cdi.spec_path(tmp_path / "cdi", "res-b").exists()


def _unload_uvm(tree: NodeTree) -> None:
    devices = tree.host_path("/proc/devices")
    devices.write_text(
        "".join(
            line
            for line in devices.read_text(encoding="utf-8").splitlines(keepends=True)
            if "nvidia-uvm" not in line
        )
    )


def _break_nvidia_ctk_spec(tree: NodeTree) -> None:
    spec = tree.host_path("/var/run/cdi/nvidia.yaml")
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text("containerEdits: [unclosed\n")


NODE_WIDE_MOMENTS = {
    "mig-minors unread": lambda tree: tree.host_path(MIG_MINORS).unlink(),
    "nvidia-uvm not loaded yet": _unload_uvm,
    "driver version unread": lambda tree: tree.host_path("/proc/driver/nvidia/version").unlink(),
    "nvidia-ctk spec half written": _break_nvidia_ctk_spec,
}


@pytest.mark.parametrize("moment", sorted(NODE_WIDE_MOMENTS))
def test_a_moment_the_node_cannot_be_read_does_not_withdraw_every_bound_allocation(
    tmp_path: Path, moment: str
) -> None:
    """The node's own files unread for a moment (a driver module still loading, a spec being
    regenerated) say nothing of any allocation's device: every bound one keeps its spec and env file
    as they are (logged `cdi.kept` once, the pass not settled), an allocation not bound yet is
    `device-missing`, and once the node reads again all is as before, nothing rewritten."""
    fake = mig_node()
    gpu = fake.list_gpus()[0]
    tree = simulated(tmp_path / "node-root")
    stream = io.StringIO()
    devices = converger(tmp_path, tree.root, log=Log(stream))
    bound = [assignment(f"res-{n}", mig_atom(gpu, gi)) for n, gi in enumerate(gpu.instances[:2])]
    assert devices.converge(node_spec(fake, "mig", *bound), fake.list_gpus()).settled
    before = {p.name: p.read_bytes() for p in [*(tmp_path / "cdi").iterdir(), *(tmp_path / "env").iterdir()]}
    saved = {p: p.read_bytes() for p in tree.root.rglob("*") if p.is_file()}
    NODE_WIDE_MOMENTS[moment](tree)
    spec = node_spec(fake, "mig", *bound, assignment("res-new", mig_atom(gpu, gpu.instances[2])))
    for said in ([("res-new", "device-missing")], []):  # the second pass has nothing new to say
        done = devices.converge(spec, fake.list_gpus())
        assert [(r["allocationId"], r["binding"]) for r in done.reports] == said
        assert not done.settled
        after = {
            p.name: p.read_bytes() for p in [*(tmp_path / "cdi").iterdir(), *(tmp_path / "env").iterdir()]
        }
        assert after == before
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert sorted((e["event"], e["allocation"]) for e in events) == [
        ("cdi.kept", "res-0"),
        ("cdi.kept", "res-1"),
    ]
    for path, data in saved.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    tree.host_path("/var/run/cdi/nvidia.yaml").unlink(missing_ok=True)
    done = devices.converge(spec, fake.list_gpus())
    assert done.settled and [(r["allocationId"], r["binding"]) for r in done.reports] == [
        ("res-new", "bound")
    ]
    assert before == {
        p.name: p.read_bytes()
        for p in [*(tmp_path / "cdi").iterdir(), *(tmp_path / "env").iterdir()]
        if "res-new" not in p.name
    }
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()][2:] == []


# -- written again when it changed -----------------------------------------------------------------


def test_a_spec_whose_driver_changed_is_rewritten_though_its_env_is_the_same(tmp_path: Path) -> None:
    """A driver upgrade changes the libraries a container must get, not its environment: the spec
    is compared whole, or containers would go on getting the old driver's (gone) files."""
    fake = whole_node()
    gpu = fake.list_gpus()[0]
    stream = io.StringIO()
    root = tmp_path / "node-root"
    simulated(root)
    devices = converger(tmp_path, root, log=Log(stream))
    spec = node_spec(fake, "exclusive", assignment("res-a", whole_atom(gpu)))
    assert devices.converge(spec, fake.list_gpus()).settled
    env_before = (tmp_path / "env" / "res-a.env").read_text(encoding="utf-8")
    simulated(root, SimulatedDriver(version="555.42.02"))
    assert devices.converge(spec, fake.list_gpus()).settled
    assert (
        mounted(edits(tmp_path / "cdi", "res-a"))[f"{LIB}/libcuda.so.1"]
        == f"{root}{LIB}/libcuda.so.555.42.02"
    )
    assert (tmp_path / "env" / "res-a.env").read_text(encoding="utf-8") == env_before
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["cdi.rewritten"]


def test_an_instance_cut_again_under_other_ids_gets_its_new_capabilities(tmp_path: Path) -> None:
    """The booked slice comes back under other GI ids (a reboot): same atom, new uuid, and new
    capability minors, which the spec must name instead of the old instance's."""
    fake = mig_node()
    gpu = fake.list_gpus()[0]
    before = next(i for i in gpu.instances if i.placement_start == 1)
    atom = mig_atom(gpu, before)
    devices = converger(tmp_path)
    spec = node_spec(fake, "mig", assignment("res-a", atom))
    devices.converge(spec, fake.list_gpus())
    old = node_paths(edits(tmp_path / "cdi", "res-a"))
    fake.gpu(gpu.uuid).gi_ids = [7, 6, 5, 4, 3, 2, 1]
    fake.gpu(gpu.uuid).apply_layout("all-1g.10gb")
    after = next(i for i in fake.list_gpus()[0].instances if i.placement_start == 1)
    assert after.gi_id != before.gi_id and mig_atom(fake.list_gpus()[0], after) == atom
    assert devices.converge(spec, fake.list_gpus()).settled
    found = edits(tmp_path / "cdi", "res-a")
    assert node_paths(found) != old
    assert f"/dev/nvidia-caps/nvidia-cap{3 + 9 * after.gi_id}" in node_paths(found)
    assert env_of(found)["BC_DEVICE_UUIDS"] == after.compute_instances[0].uuid


# -- the file --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        ({"kind": "v.io/c", "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]}, "0.3.0"),
        (
            {"kind": "v.io/c", "devices": [{"name": "a", "containerEdits": {"mounts": [{"type": "bind"}]}}]},
            "0.4.0",
        ),
        ({"kind": "v.io/c", "devices": [{"name": "0", "containerEdits": {}}]}, "0.5.0"),
        (
            {
                "kind": "v.io/c",
                "devices": [{"name": "a", "containerEdits": {}}],
                "containerEdits": {"deviceNodes": [{"path": "/d", "hostPath": "/d"}]},
            },
            "0.5.0",
        ),
        ({"kind": "v.io/c.x", "devices": [{"name": "a", "containerEdits": {}}]}, "0.6.0"),
        (
            {"kind": "v.io/c", "devices": [{"name": "a", "annotations": {"k": "v"}, "containerEdits": {}}]},
            "0.6.0",
        ),
        ({"kind": "v.io/c", "devices": [{"name": "a", "containerEdits": {"additionalGids": [5]}}]}, "0.7.0"),
        (
            {"kind": "v.io/c", "devices": [{"name": "a", "containerEdits": {"intelRdt": {"closID": "x"}}}]},
            "0.7.0",
        ),
        (
            {"kind": "v.io/c", "devices": [{"name": "a", "containerEdits": {"intelRdt": {"schemata": []}}}]},
            "1.1.0",
        ),
        (
            {
                "kind": "v.io/c",
                "devices": [{"name": "a", "containerEdits": {}}],
                "containerEdits": {"netDevices": [{"hostInterfaceName": "e", "name": "e"}]},
            },
            "1.1.0",
        ),
    ],
)
def test_the_version_is_the_lowest_the_fields_need_by_cdis_rules(spec: dict[str, Any], version: str) -> None:
    assert cdi.minimum_version(spec) == version
    assert version in cdi.VERSIONS


def test_only_an_ascii_digit_first_in_a_device_name_needs_0_5_0() -> None:
    """Regression: a name starting with another Unicode digit (`٣`) was taken to need 0.5.0; CDI
    compares the name's first byte with `0`-`9`."""
    for name, version in (("\u0663a", "0.3.0"), ("\u00b2a", "0.3.0"), ("7a", "0.5.0"), ("a7", "0.3.0")):
        spec = {"kind": "v.io/c", "devices": [{"name": name, "containerEdits": {}}]}
        assert cdi.minimum_version(spec) == version, name


def test_spec_wide_edits_count_as_a_devices_do_and_a_kind_without_a_class_needs_no_0_6_0() -> None:
    base: dict[str, Any] = {"kind": "v.io/c", "devices": [{"name": "a", "containerEdits": {}}]}
    assert (
        cdi.minimum_version({**base, "containerEdits": {"intelRdt": {"enableMonitoring": True}}}) == "1.1.0"
    )
    assert cdi.minimum_version({**base, "containerEdits": {"intelRdt": {"closID": "x"}}}) == "0.7.0"
    assert cdi.minimum_version({**base, "containerEdits": {"additionalGids": [5]}}) == "0.7.0"
    assert cdi.minimum_version({**base, "containerEdits": {"mounts": [{"type": "bind"}]}}) == "0.4.0"
    assert cdi.minimum_version({**base, "annotations": {"k": "v"}}) == "0.6.0"
    assert cdi.minimum_version({**base, "kind": "v.io"}) == "0.3.0"


def test_our_kind_needs_no_0_6_0_since_only_a_dot_in_the_class_does() -> None:
    """Debian 12's podman (CDI before 0.6.0) loads our specs: the vendor's dots are allowed since 0.3.0."""
    spec = cdi.spec_for("rsv-1", {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"}]})
    assert spec["cdiVersion"] == "0.5.0"
    assert cdi.spec_for("rsv-1", {"env": ["A=1"]})["cdiVersion"] == "0.3.0"


def test_the_schema_refuses_what_a_runtime_would_refuse() -> None:
    good = cdi.spec_for("rsv-0003", {"env": ["A=1"]})
    VALIDATOR.validate(good)
    for broken in (
        {**good, "cdiVersion": "0.9.0"},
        {**good, "kind": "better-compute.io"},
        {**good, "devices": []},
        {**good, "extra": 1},
        {**good, "devices": [{"name": "-bad", "containerEdits": {}}]},
        {**good, "devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"hostPath": "/x"}]}}]},
        {**good, "devices": [{"name": "a", "containerEdits": {"mounts": [{"hostPath": "/x"}]}}]},
        {**good, "devices": [{"name": "a", "containerEdits": {"env": ["NOEQUALS"]}}]},
    ):
        assert not VALIDATOR.is_valid(broken), broken


@pytest.mark.parametrize(
    "allocation", ["", "-rsv", "rsv-", "rsv/1", "partition:GPU-1:2026-12-01T09:00:00Z/x"]
)
def test_an_allocation_id_that_is_no_device_name_is_refused(allocation: str) -> None:
    with pytest.raises(cdi.CdiError, match="not a valid CDI device name"):
        cdi.spec_for(allocation, {})


def test_a_spec_is_written_whole_readable_by_runtimes_and_removed_once(tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    path = cdi.write_spec(root, "rsv-0005", cdi.spec_for("rsv-0005", {"env": ["A=1"]}))
    assert path == root / "better-compute.io-gpu_rsv-0005.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    VALIDATOR.validate(json.loads(path.read_text(encoding="utf-8")))
    assert cdi.read_spec(root, "rsv-0005") == cdi.spec_for("rsv-0005", {"env": ["A=1"]})
    assert [p.name for p in root.iterdir()] == [path.name]  # no partial file left behind
    assert cdi.remove_spec(root, "rsv-0005") is True
    assert cdi.remove_spec(root, "rsv-0005") is False
    assert cdi.read_spec(root, "rsv-0005") is None


def test_env_files_are_sorted_lines_and_refuse_what_cannot_be_one() -> None:
    assert cdi.env_file_text({"B": "2", "A": "1"}) == "A=1\nB=2\n"
    with pytest.raises(cdi.CdiError):
        cdi.env_file_text({"A": "two\nlines"})
    with pytest.raises(cdi.CdiError):
        cdi.env_file_text({"1A": "x"})


def test_bcd_run_refuses_a_node_root_that_is_no_directory(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        bcd_app, ["run", "--state-dir", str(tmp_path), "--node-root", str(tmp_path / "no")]
    )
    assert result.exit_code == 2
    assert result.stderr == f"error: --node-root {tmp_path / 'no'} is not a directory\n"


# -- one CDI directory shared by several nodes -----------------------------------------------------


def _sharing(tmp_path: Path, name: str, log: Log) -> DevicesConverger:
    """Node `name`'s converger over the one CDI directory `tmp_path/cdi` (its own state besides)."""
    tree = simulated(tmp_path / name / "node-root")
    return DevicesConverger(tmp_path / "cdi", tmp_path / name / "env", node=tree, log=log, node_name=name)


def test_a_node_releasing_a_moved_copy_leaves_the_new_nodes_spec(tmp_path: Path) -> None:
    """An endpoint copy keeps its allocation id when it moves: node A, which had it assigned but
    never bound (its instance not there), releases it after node B bound it, and B's spec stays."""
    fake = mig_node()
    gpu = fake.list_gpus()[0]
    stream = io.StringIO()
    a, b = _sharing(tmp_path, "n-a", Log(stream)), _sharing(tmp_path, "n-b", Log(stream))
    copy = "copy:llama:0"
    absent = assignment(copy, "atom-of-an-instance-not-made-yet")
    waiting = a.converge(node_spec(fake, "mig", absent), fake.list_gpus())
    assert [r["binding"] for r in waiting.reports] == ["device-missing"]
    moved = node_spec(fake, "mig", assignment(copy, mig_atom(gpu, gpu.instances[0])))
    assert b.converge(moved, fake.list_gpus()).settled
    assert cdi.node_of(written(tmp_path / "cdi", copy)) == "n-b"
    left = a.converge(node_spec(fake, "mig"), fake.list_gpus())
    assert left.reports == [{"kind": "AllocationReleased", "allocationId": copy}]
    assert cdi.node_of(written(tmp_path / "cdi", copy)) == "n-b"  # B's container can still start
    assert '"cdi.other-node"' in stream.getvalue() and '"n-b"' in stream.getvalue()
    assert b.converge(moved, fake.list_gpus()).settled and b.bound() == {copy}


def test_a_node_joined_by_a_copy_waits_for_the_node_it_left_and_never_takes_its_spec(tmp_path: Path) -> None:
    """The node a copy moved to does not overwrite the spec of the node it left, which may still run
    the copy's container: it is device-missing, naming that node, until that node releases it."""
    fake = whole_node()
    gpu = fake.list_gpus()[0]
    stream = io.StringIO()
    a, b = _sharing(tmp_path, "n-a", Log(stream)), _sharing(tmp_path, "n-b", Log(stream))
    copy = "copy:llama:1"
    spec = node_spec(fake, "exclusive", assignment(copy, whole_atom(gpu)))
    assert a.converge(spec, fake.list_gpus()).settled
    theirs = written(tmp_path / "cdi", copy)
    assert cdi.node_of(theirs) == "n-a"
    waits = b.converge(spec, fake.list_gpus())
    assert not waits.settled and b.bound() == set()
    ((report),) = waits.reports
    assert report["binding"] == "device-missing" and "node n-a" in report["detail"]
    assert written(tmp_path / "cdi", copy) == theirs
    assert b.converge(spec, fake.list_gpus()).reports == []  # said once
    assert stream.getvalue().count('"cdi.other-node"') == 1  # logged once
    a.converge(node_spec(fake, "exclusive"), fake.list_gpus())  # A releases its own
    assert not cdi.spec_path(tmp_path / "cdi", copy).exists()
    bound = b.converge(spec, fake.list_gpus())
    assert bound.settled and [r["binding"] for r in bound.reports] == ["bound"]
    assert cdi.node_of(written(tmp_path / "cdi", copy)) == "n-b"


def test_a_spec_names_its_node_by_cdi_0_3_0_means_and_one_of_an_older_bcd_is_anyones(tmp_path: Path) -> None:
    """The node is a variable of the spec's own edits, not an annotation (0.6.0, which Debian 12's
    podman refuses): the version stays what the devices need, and the spec stays valid CDI. A spec
    naming no node (an older `bcd`'s) is any node's to overwrite or remove."""
    edits = {"env": ["A=1"], "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"}]}
    named = cdi.spec_for("rsv-1", edits, "n-1")
    assert named["cdiVersion"] == cdi.spec_for("rsv-1", edits)["cdiVersion"] == "0.5.0"
    assert cdi.spec_for("rsv-1", {"env": ["A=1"]}, "n-1")["cdiVersion"] == "0.3.0"
    assert VALIDATOR.is_valid(named)
    assert (cdi.node_of(named), cdi.node_of(cdi.spec_for("rsv-1", edits))) == ("n-1", None)
    root = tmp_path / "cdi"
    cdi.write_spec(root, "rsv-1", cdi.spec_for("rsv-1", edits))
    cdi.write_spec(root, "rsv-1", named, "n-1")
    with pytest.raises(cdi.SpecOfAnotherNode) as other:
        cdi.write_spec(root, "rsv-1", cdi.spec_for("rsv-1", edits, "n-2"), "n-2")
    assert other.value.node == "n-1"
    with pytest.raises(cdi.SpecOfAnotherNode):
        cdi.remove_spec(root, "rsv-1", "n-2")
    assert cdi.node_of(written(root, "rsv-1")) == "n-1"
    assert cdi.remove_spec(root, "rsv-1", "n-1") and not cdi.remove_spec(root, "rsv-1", "n-1")
    cdi.write_spec(root, "rsv-1", cdi.spec_for("rsv-1", edits))
    assert cdi.remove_spec(root, "rsv-1", "n-2")
    assert [p.name for p in root.iterdir() if p.suffix in (".json", ".yaml")] == []
