"""The simulated driver's device nodes (`node_tree.make_device_nodes`, made by a daemon asked for
them): the nodes a container runtime needs to hand over a CDI device, at the numbers the tree's own
tables give, made again after a re-layout brings new instances, and never on a real node's tree.
Making them needs root (mknod): without it the tests skip, except under CI (`CI=true`)."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from better_compute.bcd.daemon import NODE_ROOT, Daemon
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.identity import Identity
from better_compute.bcd.logs import Log
from better_compute.bcd.node_tree import (
    CONTROL_MINOR,
    FAKE_MAJORS,
    NVIDIA_MAJOR,
    NodeTree,
    ci_cap,
    gi_cap,
    make_device_nodes,
    simulated,
)
from tests.builders import fleet_spec


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the device node tests cannot run: mknod needs root")
        pytest.skip("mknod needs root")


def numbers(tree: NodeTree, path: str) -> tuple[int, int]:
    found = tree.host_path(path).lstat()
    assert stat.S_ISCHR(found.st_mode), path
    return os.major(found.st_rdev), os.minor(found.st_rdev)


def test_every_gpu_its_instances_and_the_control_nodes_get_a_device_node(tmp_path: Path) -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="mig", layout="all-1g.10gb"), "n")
    tree = simulated(tmp_path / "root")
    made = make_device_nodes(tree, fake.list_gpus())
    view = tree.read()
    caps = FAKE_MAJORS["nvidia-caps"]
    expected = {
        "/dev/nvidiactl": (NVIDIA_MAJOR, CONTROL_MINOR),
        "/dev/nvidia-uvm": (FAKE_MAJORS["nvidia-uvm"], 0),
        "/dev/nvidia-uvm-tools": (FAKE_MAJORS["nvidia-uvm"], 1),
    }
    for gpu in fake.list_gpus():
        assert gpu.minor_number is not None
        expected[f"/dev/nvidia{gpu.minor_number}"] = (NVIDIA_MAJOR, gpu.minor_number)
        assert gpu.instances
        for gi in gpu.instances:
            for cap in (gi_cap(gpu.minor_number, gi.gi_id), ci_cap(gpu.minor_number, gi.gi_id, 0)):
                minor = view.cap_minor(cap)
                expected[f"/dev/nvidia-caps/nvidia-cap{minor}"] = (caps, minor)
    assert sorted(made) == sorted(expected)
    assert {path: numbers(tree, path) for path in expected} == expected
    assert stat.S_IMODE(tree.host_path("/dev/nvidiactl").stat().st_mode) == 0o666
    # Idempotent: made once.
    assert make_device_nodes(tree, fake.list_gpus()) == []
    # One made at other numbers is made again.
    tree.host_path("/dev/nvidiactl").unlink()
    os.mknod(tree.host_path("/dev/nvidiactl"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    assert make_device_nodes(tree, fake.list_gpus()) == ["/dev/nvidiactl"]
    assert numbers(tree, "/dev/nvidiactl") == (NVIDIA_MAJOR, CONTROL_MINOR)


def test_a_relayout_gets_its_new_instances_capability_nodes(tmp_path: Path) -> None:
    """The driver makes a capability's node as its instance appears: a GPU cut into instances
    after the first pass gets their nodes on the next."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="mig", layout="all-1g.10gb"), "n")
    gpu = fake.list_gpus()[0]
    for gi in gpu.instances:
        fake.destroy_instance(gpu.uuid, gi.gi_id)
    tree = simulated(tmp_path / "root")
    assert not any("nvidia-caps" in p for p in make_device_nodes(tree, fake.list_gpus()[:1]))
    fake.create_instance(gpu.uuid, "3g.40gb", 0)
    fake.create_instance(gpu.uuid, "3g.40gb", 4)
    view = tree.read()
    new = {
        f"/dev/nvidia-caps/nvidia-cap{view.cap_minor(cap)}"
        for gi in fake.list_gpus()[0].instances
        for cap in (gi_cap(0, gi.gi_id), ci_cap(0, gi.gi_id, 0))
    }
    assert len(new) == 4
    assert set(make_device_nodes(tree, fake.list_gpus()[:1])) == new
    for path in new:
        assert numbers(tree, path) == (
            FAKE_MAJORS["nvidia-caps"],
            int(path.removeprefix("/dev/nvidia-caps/nvidia-cap")),
        )


def test_a_daemon_asked_makes_them_in_its_simulated_tree_each_pass_and_never_on_another_tree(
    tmp_path: Path,
) -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")
    state = tmp_path / "state"
    state.mkdir()
    identity = Identity(state, "n", "http://server", Ed25519PrivateKey.generate())
    log = io.StringIO()
    daemon = Daemon(identity, fake, None, cdi_root=tmp_path / "cdi", log=Log(log), device_nodes=True)  # type: ignore[arg-type]
    daemon._make_device_nodes(fake.list_gpus())
    tree = NodeTree(state / NODE_ROOT)
    assert numbers(tree, "/dev/nvidia0") == (NVIDIA_MAJOR, 0)
    assert "node.device-nodes" in log.getvalue()
    with pytest.raises(ValueError, match="simulated node"):
        Daemon(
            identity,
            fake,
            None,  # type: ignore[arg-type]
            cdi_root=tmp_path / "cdi",
            log=Log(io.StringIO()),
            node_root=tmp_path / "elsewhere",
            device_nodes=True,
        )
