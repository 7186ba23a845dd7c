"""The hand-over proven with a real container runtime: Debian's podman (with runc) reads the specs
`DevicesConverger` writes to `/var/run/cdi`, and a container started with nothing but
`--device better-compute.io/gpu=<allocation>` sees exactly its atom: its GPU's device node (and, for
a MIG instance, its two capability nodes) and the driver's control nodes, the driver's libraries
and binaries, an MPS slot's pipe directory and shared memory, the environment; nothing of another
allocation. Once the allocation is released its device name no longer resolves.

The node is a tree in a temporary directory: device nodes made with `mknod` (NVIDIA's major 195;
`nvidia-uvm` and `nvidia-caps` at the majors its `/proc/devices` gives), the driver's mig-minors
table, and a simulated driver's libraries. They need root, podman, runc and Debian's
`busybox-static` (the image is `/bin/busybox` imported into podman once per session): without them
the tests skip saying which is missing, except under CI (`CI=true`), where they fail.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from better_compute.bcd import cdi
from better_compute.bcd.devices import DevicesConverger
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.mps import MpsPaths
from better_compute.bcd.node_tree import (
    CONTROL_MINOR,
    FAKE_MAJORS,
    NVIDIA_MAJOR,
    UVM_MINOR,
    UVM_TOOLS_MINOR,
    NodeTree,
    ci_cap,
    gi_cap,
    simulated,
)
from tests.bcd.handover import (
    assignment,
    mig_atom,
    mig_node,
    mps_node,
    node_spec,
    slot_atom,
    whole_atom,
    whole_node,
)
from tests.conftest import SERIAL

pytestmark = SERIAL

IMAGE = "localhost/bc-test-busybox:1"
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "ls", "cat", "env", "stat", "test", "echo", "true", "grep", "sort")
CDI_ROOT = Path("/var/run/cdi")
"""The dynamic CDI directory: the only one besides /etc/cdi that Debian 12's podman (4.3.1) reads."""
LIB = "/usr/lib/x86_64-linux-gnu"
CAPS_MAJOR = FAKE_MAJORS["nvidia-caps"]
UVM_MAJOR = FAKE_MAJORS["nvidia-uvm"]


def _unavailable(reason: str) -> None:
    """Skip, or fail under CI, which must run these tests."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the podman tests cannot run: {reason}")
    pytest.skip(reason)


def _static(path: Path) -> bool:
    """Whether an ELF executable has no interpreter (PT_INTERP), so it runs in an image holding
    nothing else."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit ELF only
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)  # e_phoff
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)  # e_phentsize, e_phnum
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Debian's busybox-static as a podman image, built once per session (no registry is reachable)."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (apt-get install podman runc)")
    if os.geteuid() != 0:
        _unavailable("device nodes (mknod) and /var/run/cdi need root")
    if not BUSYBOX.is_file() or not _static(BUSYBOX):
        _unavailable(f"{BUSYBOX} is not a static busybox (apt-get install busybox-static)")
    tarball = tmp_path_factory.mktemp("image") / "busybox.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(BUSYBOX, "bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    done = subprocess.run(
        ["podman", "import", str(tarball), IMAGE], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        _unavailable(f"podman import failed: {done.stderr.strip()}")
    return IMAGE


def _mknod(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))


@dataclass
class Node:
    """A node tree with device nodes, and the allocations a test wrote specs for (removed after)."""

    tree: NodeTree
    tmp: Path
    allocations: list[str] = field(default_factory=list)

    def allocation(self) -> str:
        name = f"bc-test-{uuid.uuid4().hex[:12]}"
        self.allocations.append(name)
        return name

    def converger(self, mps: MpsPaths | None = None) -> DevicesConverger:
        return DevicesConverger(CDI_ROOT, self.tmp / "env", mps=mps, node=self.tree)

    def caps(self, fake: FakeNode, gpu: int) -> None:
        """The capability nodes of every instance of GPU `gpu` (minor = index here), as the driver
        makes them once each is used."""
        table = self.tree.read()
        for gi in fake.list_gpus()[gpu].instances:
            for cap in (
                gi_cap(gpu, gi.gi_id),
                *(ci_cap(gpu, gi.gi_id, ci.ci_id) for ci in gi.compute_instances),
            ):
                minor = table.cap_minor(cap)
                _mknod(self.tree.host_path(f"/dev/nvidia-caps/nvidia-cap{minor}"), CAPS_MAJOR, minor)


@pytest.fixture
def node(image: str, tmp_path: Path) -> Iterator[Node]:
    tree = simulated(tmp_path / "node-root")
    try:
        for gpu in (0, 1):
            _mknod(tree.host_path(f"/dev/nvidia{gpu}"), NVIDIA_MAJOR, gpu)
    except PermissionError:
        _unavailable("mknod is not permitted here (CAP_MKNOD)")
    _mknod(tree.host_path("/dev/nvidiactl"), NVIDIA_MAJOR, CONTROL_MINOR)
    _mknod(tree.host_path("/dev/nvidia-uvm"), UVM_MAJOR, UVM_MINOR)
    _mknod(tree.host_path("/dev/nvidia-uvm-tools"), UVM_MAJOR, UVM_TOOLS_MINOR)
    found = Node(tree, tmp_path)
    try:
        yield found
    finally:
        for allocation in found.allocations:
            cdi.remove_spec(CDI_ROOT, allocation)


def podman(allocation: str, script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a container that asks for the allocation's CDI device and nothing else."""
    argv = [
        "podman", "run", "--rm", "--pull", "never", "--runtime", "runc",
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--network", "none",
        "--device", cdi.qualified_name(allocation), IMAGE, "sh", "-c", script,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def inside(allocation: str, script: str) -> str:
    done = podman(allocation, script)
    assert done.returncode == 0, done.stderr
    return done.stdout


def devices_seen(allocation: str) -> dict[str, str]:
    """{device node under /dev: `<major>:<minor>`} as the container sees them (NVIDIA's only)."""
    out = inside(
        allocation,
        "for f in /dev/nvidia* /dev/nvidia-caps/*; do test -c $f && stat -c '%n %t:%T' $f; done; true",
    )
    seen = dict(line.split() for line in out.splitlines())
    return {name: ":".join(str(int(n, 16)) for n in numbers.split(":")) for name, numbers in seen.items()}


def env_seen(allocation: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in inside(allocation, "env").splitlines() if "=" in line)


CONTROL = {
    "/dev/nvidiactl": f"{NVIDIA_MAJOR}:{CONTROL_MINOR}",
    "/dev/nvidia-uvm": f"{UVM_MAJOR}:{UVM_MINOR}",
    "/dev/nvidia-uvm-tools": f"{UVM_MAJOR}:{UVM_TOOLS_MINOR}",
}


def test_a_whole_gpu_container_sees_its_gpu_the_driver_and_nothing_of_the_other_allocation(
    node: Node,
) -> None:
    fake = whole_node()
    first, second = fake.list_gpus()[:2]
    mine, other = node.allocation(), node.allocation()
    devices = node.converger()
    spec = node_spec(
        fake, "exclusive", assignment(mine, whole_atom(second)), assignment(other, whole_atom(first))
    )
    assert devices.converge(spec, fake.list_gpus()).settled

    assert devices_seen(mine) == {"/dev/nvidia1": f"{NVIDIA_MAJOR}:1", **CONTROL}
    assert devices_seen(other) == {"/dev/nvidia0": f"{NVIDIA_MAJOR}:0", **CONTROL}
    env = env_seen(mine)
    assert env["BC_DEVICE_UUIDS"] == second.uuid and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert first.uuid not in inside(mine, "env")
    libraries = inside(
        mine, f"cat {LIB}/libcuda.so.1 {LIB}/libnvidia-ml.so.1; test -x /usr/bin/nvidia-smi && echo smi"
    )
    assert libraries == (
        "simulated libcuda.so.550.54.15: not a library\nsimulated libnvidia-ml.so.550.54.15: not a library\nsmi\n"
    )
    # The driver's files are read-only in the container.
    assert podman(mine, f"echo x > {LIB}/libcuda.so.1").returncode != 0

    # Released: the spec goes, and the runtime no longer knows the name.
    devices.converge(node_spec(fake, "exclusive", assignment(other, whole_atom(first))), fake.list_gpus())
    refused = podman(mine, "true")
    assert refused.returncode != 0
    assert f"unresolvable CDI devices {cdi.qualified_name(mine)}" in refused.stderr
    assert devices_seen(other) == {"/dev/nvidia0": f"{NVIDIA_MAJOR}:0", **CONTROL}


def test_a_mig_container_sees_its_instances_capabilities_and_not_another_instances(node: Node) -> None:
    """The holder of one instance gets its GPU's node and the access capabilities of its GPU and
    compute instance; another instance's capability nodes, present on the host, are not in its
    container. A capability node the host has not made yet is made in the container from its
    numbers."""
    fake = mig_node()
    gpu = fake.list_gpus()[0]
    held, neighbour = gpu.instances[0], gpu.instances[1]
    node.caps(fake, 0)
    table = node.tree.read()
    gi_minor = table.cap_minor(gi_cap(0, held.gi_id))
    ci_minor = table.cap_minor(ci_cap(0, held.gi_id, held.compute_instances[0].ci_id))
    node.tree.host_path(f"/dev/nvidia-caps/nvidia-cap{ci_minor}").unlink()  # not made on the host yet
    theirs = {table.cap_minor(gi_cap(0, neighbour.gi_id)), table.cap_minor(ci_cap(0, neighbour.gi_id, 0))}

    mine, other = node.allocation(), node.allocation()
    devices = node.converger()
    spec = node_spec(
        fake, "mig", assignment(mine, mig_atom(gpu, held)), assignment(other, mig_atom(gpu, neighbour))
    )
    assert devices.converge(spec, fake.list_gpus()).settled

    assert devices_seen(mine) == {
        "/dev/nvidia0": f"{NVIDIA_MAJOR}:0",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor}": f"{CAPS_MAJOR}:{gi_minor}",
        f"/dev/nvidia-caps/nvidia-cap{ci_minor}": f"{CAPS_MAJOR}:{ci_minor}",
        **CONTROL,
    }
    seen_by_other = devices_seen(other)
    assert {f"/dev/nvidia-caps/nvidia-cap{m}" for m in theirs} <= set(seen_by_other)
    assert not {f"/dev/nvidia-caps/nvidia-cap{m}" for m in (gi_minor, ci_minor)} & set(seen_by_other)
    env = env_seen(mine)
    assert env["BC_DEVICE_UUIDS"] == held.compute_instances[0].uuid
    assert neighbour.compute_instances[0].uuid not in inside(mine, "env")

    devices.converge(node_spec(fake, "mig", assignment(other, mig_atom(gpu, neighbour))), fake.list_gpus())
    assert "unresolvable CDI devices" in podman(mine, "true").stderr


def test_an_mps_slot_container_reaches_the_daemons_pipe_and_shared_memory(node: Node) -> None:
    fake = mps_node(replicas=4)
    gpu = fake.list_gpus()[0]
    paths = MpsPaths.under(node.tmp / "mps")
    mine, other = node.allocation(), node.allocation()
    for tool in ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"):  # the driver's, on the node
        node.tree.host_path(f"/usr/bin/{tool}").write_text("#!/bin/sh\n")
    devices = node.converger(mps=paths)
    spec = node_spec(
        fake, "mps", assignment(mine, slot_atom(gpu, 0)), assignment(other, slot_atom(gpu, 1)), replicas=4
    )
    assert devices.converge(spec, fake.list_gpus()).settled
    (paths.pipe_directory / "control").write_text("the MPS control pipe\n")
    (paths.shm_directory / "cuda.shm.0").write_text("shared with the MPS server\n")

    env = env_seen(mine)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(paths.pipe_directory)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["BC_DEVICE_UUIDS"] == gpu.uuid
    assert inside(mine, 'cat "$CUDA_MPS_PIPE_DIRECTORY/control" /dev/shm/cuda.shm.0') == (
        "the MPS control pipe\nshared with the MPS server\n"
    )
    # The client writes where the daemon reads: the mounts are the daemon's directories, not copies.
    inside(mine, "echo hello > /dev/shm/from-client")
    assert (paths.shm_directory / "from-client").read_text() == "hello\n"
    assert devices_seen(mine) == {"/dev/nvidia0": f"{NVIDIA_MAJOR}:0", **CONTROL}
    # The driver's binaries, less the MPS daemon's front-end and server: no ready-made tool to
    # command the node's daemon.
    assert inside(mine, "ls /usr/bin").split() == ["nvidia-smi"]

    devices.converge(
        node_spec(fake, "mps", assignment(other, slot_atom(gpu, 1)), replicas=4), fake.list_gpus()
    )
    assert "unresolvable CDI devices" in podman(mine, "true").stderr
