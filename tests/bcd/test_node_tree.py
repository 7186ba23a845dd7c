"""The node's driver tree as the driver and NVIDIA's tools lay it out: the mig-minors table,
`/proc/devices`, the driver's version, its libraries and binaries wherever a distribution puts them,
and the spec nvidia-ctk generated, whose common edits win over our own discovery."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from better_compute.bcd.node_tree import (
    NodeTree,
    Unresolvable,
    ci_cap,
    driver_mig_minors,
    gi_cap,
    mig_minor,
    parse_char_majors,
    parse_driver_version,
    simulated,
)

VERSION = "550.54.15"


def test_the_simulated_mig_minors_table_is_the_one_nvidia_documents() -> None:
    """NVIDIA's MIG user guide ("Device Nodes and Capabilities") and its toolkit's comments quote
    lines of the driver's table: every possible capability's minor is fixed in advance."""
    text = driver_mig_minors()
    lines = text.splitlines()
    assert lines[:6] == [
        "config 1",
        "monitor 2",
        "gpu0/gi0/access 3",
        "gpu0/gi0/ci0/access 4",
        "gpu0/gi0/ci1/access 5",
        "gpu0/gi0/ci2/access 6",
    ]
    assert mig_minor(text, ci_cap(3, 3, 3)) == 439 and mig_minor(text, ci_cap(3, 3, 5)) == 441
    assert mig_minor(text, ci_cap(6, 11, 7)) == 920
    assert lines[-2:] == ["gpu31/gi14/ci6/access 4321", "gpu31/gi14/ci7/access 4322"]
    assert [int(line.split()[1]) for line in lines] == list(range(1, 4323))  # each minor once, in order


def test_mig_minors_lines_that_are_not_a_capability_and_a_minor_are_skipped() -> None:
    text = "config 1\ninvalidLine\ngpu0/gi1/access x\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access\n\n"
    assert mig_minor(text, "config") == 1 and mig_minor(text, gi_cap(0, 1)) == 12
    assert mig_minor(text, ci_cap(0, 1, 0)) is None
    assert mig_minor(text, gi_cap(0, 11)) is None  # not the line of gi1


def test_char_majors_come_from_the_character_section_only() -> None:
    text = (
        "Character devices:\n  1 mem\n195 nvidia-frontend\n234 nvidia-uvm\n506 nvidia-caps\n\n"
        "Block devices:\n  7 loop\n259 nvidia-uvm\n"
    )
    assert parse_char_majors(text) == {
        "mem": 1,
        "nvidia-frontend": 195,
        "nvidia-uvm": 234,
        "nvidia-caps": 506,
    }


def test_the_nvidia_major_is_read_under_either_name_and_is_195_where_unsaid(tmp_path: Path) -> None:
    for text, major in (("195 nvidia\n", 195), ("196 nvidia-frontend\n", 196), ("", 195)):
        (tmp_path / "proc").mkdir(exist_ok=True)
        (tmp_path / "proc/devices").write_text(f"Character devices:\n{text}")
        assert NodeTree(tmp_path).read().char_major("nvidia") == major
    assert NodeTree(tmp_path).read().char_major("nvidia-caps") is None


@pytest.mark.parametrize(
    "line",
    [
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16)",
        "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  550.54.15  Release Build",
    ],
)
def test_the_driver_version_is_read_from_either_kernel_modules_banner(line: str) -> None:
    assert parse_driver_version(f"{line}\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n") == VERSION


def driver_root(root: Path) -> None:
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {VERSION}  x\n"
    )


def mounts(tree: NodeTree) -> dict[str, str]:
    return {m["containerPath"]: m["hostPath"] for m in tree.read().driver().mounts}


def test_libraries_behind_debians_alternatives_and_a_merged_usr_are_found_once(tmp_path: Path) -> None:
    """Debian links `/usr/lib/x86_64-linux-gnu/libcuda.so.1` through `/etc/alternatives` (absolute
    links) to `nvidia/current/`; `/lib` is a link to `usr/lib`. Links are followed inside the node
    root, each library is mounted once, where the linker finds it, from the file it resolves to."""
    root = tmp_path / "root"
    driver_root(root)
    lib = root / "usr/lib/x86_64-linux-gnu"
    (lib / "nvidia/current").mkdir(parents=True)
    (lib / f"nvidia/current/libcuda.so.{VERSION}").write_text("cuda")
    (lib / "nvidia/current/libcuda.so.1").symlink_to(f"libcuda.so.{VERSION}")
    (root / "etc/alternatives").mkdir(parents=True)
    (root / "etc/alternatives/libcuda.so.1").symlink_to(
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1"
    )
    (lib / "libcuda.so.1").symlink_to("/etc/alternatives/libcuda.so.1")
    (lib / "libcudart.so.12.4.127").write_text("a toolkit library, not the driver's")
    (lib / "libfoo.so.1").symlink_to("/nowhere/libfoo.so.1")
    (root / "lib").symlink_to("usr/lib")
    (root / "usr/lib/nvidia/current").mkdir(parents=True)
    (root / "usr/lib/nvidia/current/nvidia-smi").write_text("smi")
    (root / "etc/alternatives/nvidia-smi").symlink_to("/usr/lib/nvidia/current/nvidia-smi")
    (root / "usr/bin").mkdir()
    (root / "usr/bin/nvidia-smi").symlink_to("/etc/alternatives/nvidia-smi")
    (root / "bin").symlink_to("usr/bin")
    assert mounts(NodeTree(root)) == {
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1": f"{lib}/nvidia/current/libcuda.so.{VERSION}",
        "/usr/bin/nvidia-smi": f"{root}/usr/lib/nvidia/current/nvidia-smi",
    }


def test_directories_named_by_ld_so_conf_are_searched(tmp_path: Path) -> None:
    root = tmp_path / "root"
    driver_root(root)
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("# comment\ninclude /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/nvidia.conf").write_text("/opt/nvidia/lib64  # the .run installer's prefix\n")
    (root / "opt/nvidia/lib64").mkdir(parents=True)
    (root / f"opt/nvidia/lib64/libnvidia-ml.so.{VERSION}").write_text("nvml")
    tree = NodeTree(root)
    assert tree.read().library_dirs() == ["/opt/nvidia/lib64"]
    assert list(mounts(tree)) == [f"/opt/nvidia/lib64/libnvidia-ml.so.{VERSION}"]


def test_symlinks_cannot_leave_the_node_root_or_loop(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside").write_text("host file")
    (root / "up").symlink_to("../../outside")
    (root / "loop").symlink_to("loop")
    tree = NodeTree(root)
    assert tree.resolve("/up") is None  # `..` stops at the root: /outside is not in the tree
    assert tree.resolve("/loop") is None


NVIDIA_CTK_SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
    - name: "0"
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia0
              hostPath: /dev/nvidia0
containerEdits:
    env:
        - NVIDIA_CTK_LIBCUDA_DIR=/lib/x86_64-linux-gnu
        - NVIDIA_VISIBLE_DEVICES=void
    deviceNodes:
        - path: /dev/nvidiactl
          hostPath: /dev/nvidiactl
        - path: /dev/nvidia-modeset
          hostPath: /dev/nvidia-modeset
    hooks:
        - hookName: createContainer
          path: /usr/bin/nvidia-cdi-hook
          args: [nvidia-cdi-hook, update-ldcache, --folder, /lib/x86_64-linux-gnu]
          env: [NVIDIA_CTK_DEBUG=false]
    mounts:
        - hostPath: /lib/x86_64-linux-gnu/libcuda.so.999.88.77
          containerPath: /lib/x86_64-linux-gnu/libcuda.so.999.88.77
          options: [ro, nosuid, nodev, rbind, rprivate]
"""


def test_the_nodes_nvidia_ctk_spec_gives_the_driver_less_its_devices(tmp_path: Path) -> None:
    """Where nvidia-ctk described the driver, its common edits are taken as written (its mounts and
    hooks name host paths nvidia-ctk chose for this node); its device nodes and its
    `NVIDIA_VISIBLE_DEVICES` are not: which devices a container gets is the allocation's."""
    root = tmp_path / "root"
    driver_root(root)  # a driver our own discovery would also find, had the node no nvidia-ctk spec
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").write_text(NVIDIA_CTK_SPEC)
    driver = NodeTree(root).read().driver()
    assert driver.source == f"nvidia-ctk spec {root}/etc/cdi/nvidia.yaml"
    assert driver.env == ("NVIDIA_CTK_LIBCUDA_DIR=/lib/x86_64-linux-gnu",)
    assert [m["hostPath"] for m in driver.mounts] == ["/lib/x86_64-linux-gnu/libcuda.so.999.88.77"]
    assert [h["args"][1] for h in driver.hooks] == ["update-ldcache"]
    assert "nvidia-modeset" not in json.dumps([driver.mounts, driver.hooks, driver.env])
    # nvidia-cdi-refresh's spec in the dynamic directory is the fresher one, as a CDI runtime ranks it.
    (root / "var/run/cdi").mkdir(parents=True)
    (root / "var/run/cdi/nvidia.json").write_text(
        json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []})
    )
    assert NodeTree(root).read().driver().source == f"nvidia-ctk spec {root}/var/run/cdi/nvidia.json"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("containerEdits: [unclosed", "is not valid YAML"),
        ("containerEdits: [1, 2]", "containerEdits that are not a mapping"),
        ("containerEdits: {mounts: [{hostPath: /x}]}", "a mount without hostPath and containerPath"),
        ("containerEdits: {env: NVIDIA_VISIBLE_DEVICES=void}", "containerEdits.env of the wrong shape"),
    ],
)
def test_a_broken_nvidia_ctk_spec_is_named_not_worked_around(tmp_path: Path, text: str, message: str) -> None:
    """An operator generated it to describe the driver: one that does not parse is theirs to fix
    (`nvidia-ctk cdi generate`), and every hand-over says so rather than guess the driver otherwise."""
    (tmp_path / "etc/cdi").mkdir(parents=True)
    (tmp_path / "etc/cdi/nvidia.yaml").write_text(text)
    with pytest.raises(Unresolvable, match=message) as raised:
        NodeTree(tmp_path).read().driver()
    assert str(tmp_path / "etc/cdi/nvidia.yaml") in str(raised.value)


def test_a_simulated_tree_is_laid_out_once_and_left_as_it_is(tmp_path: Path) -> None:
    tree = simulated(tmp_path)
    table = tree.host_path("/proc/driver/nvidia-caps/mig-minors")
    before = table.stat().st_mtime_ns
    os.utime(table, ns=(before - 10**9, before - 10**9))
    simulated(tmp_path)
    assert table.stat().st_mtime_ns == before - 10**9  # not written again
    assert tree.read().driver().source == "driver 550.54.15"
    assert tree.read().cap_minor(gi_cap(1, 2)) == 3 + 135 + 18


def mps_binaries(root: Path) -> None:
    """A driver with its MPS control daemon and server, beside `nvidia-smi`."""
    driver_root(root)
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / f"usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}").write_text("cuda")
    (root / "usr/bin").mkdir(parents=True)
    for binary in ("nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"):
        (root / "usr/bin" / binary).write_text(binary)


def test_no_container_gets_the_mps_control_daemon_or_server_from_discovery(tmp_path: Path) -> None:
    """`nvidia-cuda-mps-control` in a slot's container is a ready-made tool to tell the node's MPS
    daemon `quit` or new limits, and no client needs it (nor the server, which the node's daemon
    spawns): neither is mounted."""
    root = tmp_path / "root"
    mps_binaries(root)
    assert sorted(p for p in mounts(NodeTree(root)) if p.startswith("/usr/bin/")) == ["/usr/bin/nvidia-smi"]


def test_no_container_gets_the_mps_control_daemon_or_server_from_the_nodes_nvidia_ctk_spec(
    tmp_path: Path,
) -> None:
    """nvidia-ctk mounts both into every container (pkg/nvcdi/driver-nvml.go); `bcd` takes its
    other common edits and leaves those two out, wherever on the node they are mounted from."""
    root = tmp_path / "root"
    mps_binaries(root)
    binaries = "".join(
        f"""
        - hostPath: {host}
          containerPath: /usr/bin/{name}
          options: [ro, nosuid, nodev, bind]"""
        for host, name in (
            ("/usr/bin/nvidia-smi", "nvidia-smi"),
            ("/usr/bin/nvidia-cuda-mps-control", "nvidia-cuda-mps-control"),
            ("/run/nvidia/driver/usr/bin/nvidia-cuda-mps-server", "nvidia-cuda-mps-server"),
        )
    )
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").write_text(NVIDIA_CTK_SPEC + binaries.lstrip("\n") + "\n")
    driver = NodeTree(root).read().driver()
    assert driver.source.startswith("nvidia-ctk spec")
    assert [m["containerPath"] for m in driver.mounts] == [
        "/lib/x86_64-linux-gnu/libcuda.so.999.88.77",
        "/usr/bin/nvidia-smi",
    ]
    assert "nvidia-cuda-mps" not in json.dumps([driver.mounts, driver.hooks, driver.env])
