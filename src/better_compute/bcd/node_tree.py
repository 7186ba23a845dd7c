"""The node's driver tree: what `bcd` reads of the NVIDIA driver on the node to hand a device to a
container through CDI, under a node root (`bcd run --node-root`, `/` on a GPU node).

Everything a container needs from the node is named here as a path inside the container (`/dev/
nvidia0`, `/usr/lib/x86_64-linux-gnu/libcuda.so.1`); the file the container runtime takes it from is
that path under the node root. So a test, or a simulated node, points the root at a tree of its own
and gets the specs a GPU node would get, with host paths into that tree.

What is read, each as the driver lays it out:

- `/proc/driver/nvidia-caps/mig-minors`: the minor of each MIG capability's device node under
  `/dev/nvidia-caps/` (`gpu<minor>/gi<id>/access N` and `gpu<minor>/gi<id>/ci<id>/access N`, the GPU
  named by its device minor, not its NVML index), as NVIDIA's MIG user guide documents it and
  nvidia-container-toolkit reads it;
- `/proc/devices`: the character majors of `nvidia-uvm` and `nvidia-caps` (the kernel hands them out
  at load time; `nvidia`/`nvidia-frontend` is 195);
- `/proc/driver/nvidia/version`: the kernel module's version, which names the user-space libraries
  that belong to it (`lib*.so.<version>`, as nvidia-ctk finds them);
- the library directories of `/etc/ld.so.conf` and the system's own, and the executable directories,
  for the driver's libraries and its binaries (`nvidia-smi`...; never the MPS control daemon's);
- the spec `nvidia-ctk cdi generate` wrote, where there is one (`/var/run/cdi/nvidia.{yaml,json}`,
  kept by `nvidia-cdi-refresh`, before `/etc/cdi/nvidia.{yaml,json}`).

A node that cannot say what a device needs (a GPU with no minor, no mig-minors line for an instance,
no driver libraries) raises `Unresolvable` with what is missing: the caller hands nothing over rather
than a spec that lacks a node. It says whether the reason is the node's (`node_wide`: the driver's
files, the mig-minors table, the nvidia-ctk spec, a driver's major) or the device's own.

`simulated` lays out such a tree for the fake backend (`bcd run --nvml fake`) on a machine with no
NVIDIA driver: the mig-minors table the driver writes, a `/proc/devices`, a driver version and
stand-ins for its libraries and `nvidia-smi`. Its device nodes are absent (making them needs root),
so the specs name their numbers (`deviceNodes[].major/minor`), as for any node the host lacks;
`make_device_nodes` makes them, as the driver would, where a container runtime is to run containers
with them (`serve --fleet` under podman, which refuses a CDI device node the host lacks).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from better_compute.bcd.gpu import Gpu

NVIDIA_MAJOR = 195
"""The NVIDIA driver's fixed character major: `/dev/nvidia<minor>` and `/dev/nvidiactl`."""
CONTROL_MINOR = 255
"""`/dev/nvidiactl`'s minor."""
UVM_MINOR, UVM_TOOLS_MINOR = 0, 1
"""`/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools`: minors 0 and 1 of the `nvidia-uvm` module's major."""

CONTROL_NODES: tuple[tuple[str, str, int], ...] = (
    ("/dev/nvidiactl", "nvidia", CONTROL_MINOR),
    ("/dev/nvidia-uvm", "nvidia-uvm", UVM_MINOR),
    ("/dev/nvidia-uvm-tools", "nvidia-uvm", UVM_TOOLS_MINOR),
)
"""The driver's device nodes every CUDA container needs, whatever its GPU: (path, the `/proc/devices`
name of its major, its minor)."""

MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
PROC_DEVICES = "/proc/devices"
DRIVER_VERSION = "/proc/driver/nvidia/version"
CAPS_DIR = "/dev/nvidia-caps"
NVIDIA_CTK_SPECS = (
    "/var/run/cdi/nvidia.yaml",
    "/var/run/cdi/nvidia.json",
    "/etc/cdi/nvidia.yaml",
    "/etc/cdi/nvidia.json",
)
"""Where `nvidia-ctk cdi generate` (or `nvidia-cdi-refresh`, in the dynamic directory, which a CDI
runtime prefers) leaves the node's NVIDIA spec, in the order they are looked for."""

SYSTEM_LIBRARY_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)
"""The dynamic linker's own search directories (Debian/Ubuntu multiarch, then RHEL's lib64), looked
in after those `/etc/ld.so.conf` names."""
EXECUTABLE_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
DRIVER_BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")
"""The driver's binaries a container may run: the list nvidia-ctk mounts, less the IMEX daemon and
`MPS_BINARIES`."""
MPS_BINARIES = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
"""The MPS control daemon's front-end and its server, which nvidia-ctk mounts into every container
and `bcd` never does (nor takes from an nvidia-ctk spec): a client container has no use for them (the
node's daemon spawns the servers; a client needs only the pipe directory), and in an MPS slot's
container the front-end would be a ready-made tool to tell the node's daemon `quit` or
`set_default_active_thread_percentage 100`. Leaving them out is hardening, not a boundary: the
daemon listens on the pipe directory the slot has mounted, so a tenant's own copy of the front-end
reaches it all the same (docs/bcd.md, MPS)."""

READ_ONLY = ("ro", "nosuid", "nodev", "rbind", "rprivate")
"""Mount options of the driver's files: nvidia-ctk's."""

_MAX_GPUS, _MAX_GIS, _MAX_CIS = 32, 15, 8
"""The extent of the driver's mig-minors table: GPU minors 0-31, GPU instance ids 0-14, compute
instance ids 0-7 (its last line is `gpu31/gi14/ci7/access 4322`)."""

_LIBRARY = re.compile(r"^lib[^/]*\.so(\.[0-9]+)*$")
_VERSION = re.compile(r"\b([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b")
_MAX_LINKS = 40


class Unresolvable(Exception):
    """The node cannot say what a device needs; the message names what is missing.

    `node_wide` when the reason is the node's, not the device's: the driver's files, the
    mig-minors table, the nvidia-ctk spec or a driver's major unread, which every allocation would
    hit alike and which a moment later may read again (a driver still loading, a spec being
    regenerated). A bound allocation keeps its spec through such a moment; one whose own device
    cannot be named (its GPU has no minor, its instance no mig-minors line) loses it
    (`bcd.devices`)."""

    def __init__(self, message: str, *, node_wide: bool = False) -> None:
        super().__init__(message)
        self.node_wide = node_wide


def gi_cap(gpu_minor: int, gi_id: int) -> str:
    """The mig-minors name of a GPU instance's access capability."""
    return f"gpu{gpu_minor}/gi{gi_id}/access"


def ci_cap(gpu_minor: int, gi_id: int, ci_id: int) -> str:
    """The mig-minors name of a compute instance's access capability."""
    return f"gpu{gpu_minor}/gi{gi_id}/ci{ci_id}/access"


def cap_node(minor: int) -> str:
    """The device node of the capability with this minor."""
    return f"{CAPS_DIR}/nvidia-cap{minor}"


def mig_minor(text: str, cap: str) -> int | None:
    """The minor a mig-minors file gives capability `cap` (a `<name> <minor>` line); None when it has
    none. Lines of another shape are not read, as nvidia-container-toolkit skips them. The driver's
    table has 4322 lines, so one capability is looked up, not the whole table parsed."""
    found = re.search(rf"^{re.escape(cap)}[ \t]+([0-9]+)[ \t]*$", text, re.MULTILINE)
    return int(found.group(1)) if found else None


def parse_char_majors(text: str) -> dict[str, int]:
    """{driver name: major} of the character devices in a `/proc/devices` (its block devices, which
    reuse numbers, are left out)."""
    majors: dict[str, int] = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            section = stripped
            continue
        parts = stripped.split()
        if section == "Character devices:" and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    return majors


def parse_driver_version(text: str) -> str | None:
    """The kernel module's version from `/proc/driver/nvidia/version` (`NVRM version: NVIDIA UNIX
    x86_64 Kernel Module  550.54.15  ...` or `... Open Kernel Module for x86_64  550.54.15 ...`)."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            found = _VERSION.search(line.split("Module", 1)[-1])
            return found.group(1) if found else None
    return None


def driver_mig_minors() -> str:
    """The mig-minors table as the driver writes it: `config 1`, `monitor 2`, then for each GPU minor,
    each GPU instance id: its access capability, then each compute instance's. The minors of every
    possible capability are fixed in advance (NVIDIA's MIG user guide, "Device Nodes and
    Capabilities"), so the table is the same on every node."""
    lines = ["config 1", "monitor 2"]
    minor = 2
    for gpu in range(_MAX_GPUS):
        for gi in range(_MAX_GIS):
            minor += 1
            lines.append(f"{gi_cap(gpu, gi)} {minor}")
            for ci in range(_MAX_CIS):
                minor += 1
                lines.append(f"{ci_cap(gpu, gi, ci)} {minor}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class DriverEdits:
    """What a container gets of the node's driver, whatever its device: mounts, hooks and env in CDI's
    shape, and where they were read from."""

    mounts: tuple[dict[str, Any], ...]
    hooks: tuple[dict[str, Any], ...] = ()
    env: tuple[str, ...] = ()
    source: str = ""
    """`nvidia-ctk spec <path>` or `driver <version>`."""


@dataclass(frozen=True, slots=True)
class NodeTree:
    """The node's files under `root`."""

    root: Path = Path("/")

    def host_path(self, path: str) -> Path:
        """Where the runtime finds `path` (absolute, as a container sees it) on the node."""
        return self.root / path.lstrip("/")

    def read(self) -> NodeView:
        """A view for one pass: each file is read once, when first needed, and not again."""
        return NodeView(self)

    def resolve(self, path: str, within: str = "/") -> str | None:
        """`path` with its symlinks followed inside the node root (an absolute target is taken from
        the root, as it would be on the node), as a path under the root; None when it leads nowhere.
        `within` is a directory already resolved that a relative `path` starts from."""
        root = str(self.root).rstrip("/")
        parts = [p for p in path.split("/") if p]
        done = [] if path.startswith("/") else [p for p in within.split("/") if p]
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            current = "/".join([root, *done, part])
            try:
                mode = os.lstat(current).st_mode
            except OSError:
                return None  # nothing there: it leads nowhere
            if not stat.S_ISLNK(mode):
                done.append(part)
                continue
            hops += 1
            if hops > _MAX_LINKS:
                return None
            target = os.readlink(current)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
        return "/" + "/".join(done)


def _mount(host: Path, container: str) -> dict[str, Any]:
    return {"hostPath": str(host), "containerPath": container, "options": list(READ_ONLY)}


class NodeView:
    """The node as one pass reads it: each answer (or the reason there is none) is kept, so every
    allocation of the pass is handed the same node."""

    def __init__(self, tree: NodeTree) -> None:
        self.tree = tree
        self._caps: str | Unresolvable | None = None
        self._majors: dict[str, int] | None = None
        self._driver: DriverEdits | Unresolvable | None = None

    def _text(self, path: str) -> str | None:
        try:
            return self.tree.host_path(path).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            return None

    # -- device nodes ------------------------------------------------------------------------------

    def cap_minor(self, cap: str) -> int:
        """The minor of a MIG capability (`gi_cap`, `ci_cap`); `Unresolvable` when the node's
        mig-minors file is missing or has no line for it."""
        if self._caps is None:
            try:
                text = self._text(MIG_MINORS)
            except OSError as exc:
                text, reason = None, f"cannot be read ({exc.strerror})"
            else:
                reason = "is missing (is the NVIDIA driver loaded, with MIG support?)"
            self._caps = (
                Unresolvable(f"{self.tree.host_path(MIG_MINORS)} {reason}", node_wide=True)
                if text is None
                else text
            )
        if isinstance(self._caps, Unresolvable):
            raise self._caps
        minor = mig_minor(self._caps, cap)
        if minor is None:
            raise Unresolvable(f"{self.tree.host_path(MIG_MINORS)} has no line for {cap}")
        return minor

    def char_major(self, name: str) -> int | None:
        """The character major `/proc/devices` gives the driver `name`; `nvidia` is 195 (listed as
        `nvidia-frontend` or `nvidia`) even where the file does not say."""
        if self._majors is None:
            try:
                text = self._text(PROC_DEVICES)
            except OSError:
                text = None
            self._majors = parse_char_majors(text or "")
        if name == "nvidia":
            return self._majors.get("nvidia-frontend", self._majors.get("nvidia", NVIDIA_MAJOR))
        return self._majors.get(name)

    def device_node(self, path: str, driver: str, minor: int) -> dict[str, Any]:
        """A CDI device node for `path`. Where the node has it, its numbers are left for the runtime
        to take from it (as nvidia-ctk leaves them); where it does not (the driver makes the caps
        nodes when something first asks for them), the node is named by type and numbers, so the
        runtime creates it in the container all the same."""
        host = self.tree.host_path(path)
        node: dict[str, Any] = {"path": path, "hostPath": str(host)}
        try:
            if stat.S_ISCHR(host.stat().st_mode):
                return node
        except OSError:
            pass
        major = self.char_major(driver)
        if major is None:
            raise Unresolvable(
                f"{host} does not exist and {self.tree.host_path(PROC_DEVICES)} names no {driver} major",
                node_wide=True,
            )
        return {**node, "type": "c", "major": major, "minor": minor}

    # -- the driver's files ------------------------------------------------------------------------

    def driver(self) -> DriverEdits:
        """The driver's files for every container: the common edits of the node's nvidia-ctk spec
        where there is one, else the libraries and binaries found in the tree."""
        if self._driver is None:
            try:
                self._driver = self._nvidia_ctk() or self._discovered()
            except Unresolvable as exc:
                self._driver = exc
        if isinstance(self._driver, Unresolvable):
            raise self._driver
        return self._driver

    def _nvidia_ctk(self) -> DriverEdits | None:
        for name in NVIDIA_CTK_SPECS:
            path = self.tree.host_path(name)
            try:
                text = path.read_text(encoding="utf-8")
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise Unresolvable(
                    f"the node's NVIDIA CDI spec {path} cannot be read ({exc.strerror})", node_wide=True
                ) from exc
            return common_edits(text, path)
        return None

    def _discovered(self) -> DriverEdits:
        text = self._text(DRIVER_VERSION)
        version = parse_driver_version(text or "")
        if version is None:
            raise Unresolvable(
                f"{self.tree.host_path(DRIVER_VERSION)} is missing or names no driver version"
                " (is the NVIDIA driver loaded?)",
                node_wide=True,
            )
        mounts: dict[str, dict[str, Any]] = {}
        dirs = self.library_dirs()
        for directory in dirs:
            for name, is_link in self._entries(directory):
                if not _LIBRARY.match(name) or not (is_link or name.endswith(f".so.{version}")):
                    continue
                # The directory is resolved already: only the entry's own links are followed.
                real = self.tree.resolve(name, within=directory) if is_link else f"{directory}/{name}"
                if real is not None and real.endswith(f".so.{version}") and self._is_file(real):
                    mounts.setdefault(
                        f"{directory}/{name}", _mount(self.tree.host_path(real), f"{directory}/{name}")
                    )
        if not mounts:
            searched = ", ".join(dirs)
            raise Unresolvable(
                f"no library of NVIDIA driver {version} under {self.tree.root} (in {searched})",
                node_wide=True,
            )
        for binary in DRIVER_BINARIES:
            for directory in self._canonical(EXECUTABLE_DIRS):
                real = self.tree.resolve(f"{directory}/{binary}")
                if real is not None and self._is_file(real):
                    mounts.setdefault(
                        f"{directory}/{binary}", _mount(self.tree.host_path(real), f"{directory}/{binary}")
                    )
                    break
        return DriverEdits(tuple(mounts[k] for k in sorted(mounts)), source=f"driver {version}")

    def _is_file(self, path: str) -> bool:
        return self.tree.host_path(path).is_file()

    def _entries(self, directory: str) -> list[tuple[str, bool]]:
        """(name, whether it is a symlink) of each entry of `directory`, by name."""
        try:
            with os.scandir(self.tree.host_path(directory)) as found:
                return sorted((e.name, e.is_symlink()) for e in found)
        except OSError:
            return []

    def _canonical(self, dirs: Iterable[str]) -> list[str]:
        """`dirs` with their symlinks followed (`/lib` is `/usr/lib` on a merged-/usr system), each
        once, in order; those that do not exist are left out."""
        seen: list[str] = []
        for directory in dirs:
            real = self.tree.resolve(directory)
            if real is not None and real not in seen and self.tree.host_path(real).is_dir():
                seen.append(real)
        return seen

    def library_dirs(self) -> list[str]:
        """Where the dynamic linker looks: the directories `/etc/ld.so.conf` names (its `include`s
        followed), then the system's own; each once, symlinks followed."""
        named: list[str] = []
        self._ld_conf("/etc/ld.so.conf", named, depth=0)
        return self._canonical([*named, *SYSTEM_LIBRARY_DIRS])

    def _ld_conf(self, path: str, named: list[str], depth: int) -> None:
        if depth > 8:
            return
        try:
            text = self._text(path)
        except OSError:
            return
        for raw in (text or "").splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line or line.startswith("hwcap "):
                continue
            if line.startswith("include "):
                base = self.tree.host_path("/")
                for pattern in line.split()[1:]:
                    absolute = (
                        pattern if pattern.startswith("/") else str(PurePosixPath(path).parent / pattern)
                    )
                    for found in sorted(base.glob(absolute.lstrip("/"))):
                        self._ld_conf("/" + found.relative_to(base).as_posix(), named, depth + 1)
                continue
            named.extend(d for d in re.split(r"[\s:,]+", line) if d.startswith("/"))


def common_edits(text: str, path: Path) -> DriverEdits:
    """The edits of an nvidia-ctk spec that every one of its devices gets (its top-level
    `containerEdits`), less its device nodes and its `NVIDIA_VISIBLE_DEVICES` (the devices are ours
    to name, per allocation) and less the mounts of `MPS_BINARIES`. Its other mounts and its hooks
    (the driver's libraries, binaries, firmware and sockets; `nvidia-cdi-hook` making the libraries'
    links and the container's linker cache) are taken as written: nvidia-ctk wrote their host paths
    for this node."""
    try:
        spec = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise Unresolvable(
            f"the node's NVIDIA CDI spec {path} is not valid {path.suffix[1:].upper()}: {exc}", node_wide=True
        ) from exc
    edits = spec.get("containerEdits") if isinstance(spec, Mapping) else None
    if edits is None:
        edits = {}
    if not isinstance(edits, Mapping):
        raise Unresolvable(
            f"the node's NVIDIA CDI spec {path} has containerEdits that are not a mapping", node_wide=True
        )
    env = _list_of(edits, "env", str, path)
    mounts = _list_of(edits, "mounts", Mapping, path)
    hooks = _list_of(edits, "hooks", Mapping, path)
    for mount in mounts:
        if not isinstance(mount.get("hostPath"), str) or not isinstance(mount.get("containerPath"), str):
            raise Unresolvable(
                f"the node's NVIDIA CDI spec {path} has a mount without hostPath and containerPath",
                node_wide=True,
            )
    for hook in hooks:
        if not isinstance(hook.get("hookName"), str) or not isinstance(hook.get("path"), str):
            raise Unresolvable(
                f"the node's NVIDIA CDI spec {path} has a hook without hookName and path", node_wide=True
            )
    return DriverEdits(
        mounts=tuple(dict(m) for m in mounts if not _is_mps_binary(m)),
        hooks=tuple(dict(h) for h in hooks),
        env=tuple(e for e in env if "=" in e and not e.startswith("NVIDIA_VISIBLE_DEVICES=")),
        source=f"nvidia-ctk spec {path}",
    )


def _is_mps_binary(mount: Mapping[str, Any]) -> bool:
    """Whether a mount gives the container one of `MPS_BINARIES` (by its name inside the container,
    or on the node: nvidia-ctk may mount it from a driver root elsewhere)."""
    return any(PurePosixPath(mount[key]).name in MPS_BINARIES for key in ("containerPath", "hostPath"))


def _list_of(edits: Mapping[str, Any], key: str, kind: type, path: Path) -> list[Any]:
    value = edits.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
        raise Unresolvable(
            f"the node's NVIDIA CDI spec {path} has a containerEdits.{key} of the wrong shape", node_wide=True
        )
    return value


# -- a simulated node's tree ---------------------------------------------------------------------------

FAKE_DRIVER_VERSION = "550.54.15"
FAKE_MAJORS = {"nvidia-uvm": 508, "nvidia-caps": 511}
"""The majors the simulated driver's `/proc/devices` gives its dynamic devices (the kernel hands such
numbers out from the top of the dynamic range)."""
FAKE_LIBRARIES = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so")


@dataclass(frozen=True, slots=True)
class SimulatedDriver:
    """What `simulated` lays out; tests make trees with other versions or numbers."""

    version: str = FAKE_DRIVER_VERSION
    majors: Mapping[str, int] = field(default_factory=lambda: dict(FAKE_MAJORS))
    library_dir: str = "/usr/lib/x86_64-linux-gnu"
    libraries: tuple[str, ...] = FAKE_LIBRARIES


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `path` whole (a reader never sees half a file), unless it already says `text`."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.chmod(partial, mode)
    os.replace(partial, path)


def simulated(root: Path, driver: SimulatedDriver | None = None) -> NodeTree:
    """Lay out a simulated NVIDIA driver's files under `root` (the driver's mig-minors table, a
    `/proc/devices`, its version, stand-ins for its libraries with their soname links, and
    `nvidia-smi`) and return the tree. Files already as they should be are left alone."""
    driver = driver or SimulatedDriver()
    tree = NodeTree(root)
    _write(tree.host_path(MIG_MINORS), driver_mig_minors())
    devices = ["Character devices:", "  1 mem", "  4 tty", "  5 /dev/tty", f"{NVIDIA_MAJOR} nvidia-frontend"]
    devices += [f"{major} {name}" for name, major in sorted(driver.majors.items(), key=lambda kv: kv[1])]
    devices += ["", "Block devices:", "  7 loop", "259 blkext"]
    _write(tree.host_path(PROC_DEVICES), "\n".join(devices) + "\n")
    _write(
        tree.host_path(DRIVER_VERSION),
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver.version}  (simulated by better-compute)\n",
    )
    for library in driver.libraries:
        real = tree.host_path(f"{driver.library_dir}/{library}.{driver.version}")
        _write(real, f"simulated {library}.{driver.version}: not a library\n")
        link = real.with_name(f"{library}.1")
        if not link.is_symlink() or os.readlink(link) != real.name:
            link.unlink(missing_ok=True)
            link.symlink_to(real.name)
    _write(tree.host_path("/usr/bin/nvidia-smi"), "#!/bin/sh\necho 'simulated nvidia-smi'\n", 0o755)
    return tree


def make_device_nodes(tree: NodeTree, gpus: Iterable[Gpu]) -> list[str]:
    """Make the character device nodes a simulated driver has for `gpus` under `tree`, as the real
    driver has them under `/dev`: `/dev/nvidia<minor>` (major 195) for each GPU, `/dev/nvidiactl`,
    `/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools`, and `/dev/nvidia-caps/nvidia-cap<minor>` for each
    GPU instance and compute instance there is now (the driver makes a capability's node as its
    instance appears), each at the numbers the tree's own `/proc/devices` and mig-minors table give,
    so the CDI specs written from the same tree name them. A container runtime refuses a CDI device
    whose host node is missing, so a simulated node run under podman needs them.

    Idempotent: a node already there at its numbers is left alone, one at other numbers (or not a
    character device) is made again. Nothing is removed (the driver keeps an instance's capability
    nodes after it goes too). Returns the paths made. Needs CAP_MKNOD (root); the caller, which owns
    the tree, must be sure the numbers are no real device's (`serve --fleet` asks only where the
    machine has no NVIDIA driver)."""
    view = tree.read()
    wanted: dict[str, tuple[int, int]] = {}
    for path, driver, minor in CONTROL_NODES:
        major = view.char_major(driver)
        if major is None:
            raise Unresolvable(f"{tree.host_path(PROC_DEVICES)} names no {driver} major", node_wide=True)
        wanted[path] = (major, minor)
    caps_major = view.char_major("nvidia-caps")
    for gpu in gpus:
        if gpu.minor_number is None:
            continue
        wanted[f"/dev/nvidia{gpu.minor_number}"] = (NVIDIA_MAJOR, gpu.minor_number)
        for gi in gpu.instances:
            caps = [gi_cap(gpu.minor_number, gi.gi_id)]
            caps += [ci_cap(gpu.minor_number, gi.gi_id, ci.ci_id) for ci in gi.compute_instances]
            for cap in caps:
                if caps_major is None:
                    raise Unresolvable(
                        f"{tree.host_path(PROC_DEVICES)} names no nvidia-caps major", node_wide=True
                    )
                minor = view.cap_minor(cap)
                wanted[cap_node(minor)] = (caps_major, minor)
    made: list[str] = []
    for path, (major, minor) in sorted(wanted.items()):
        host = tree.host_path(path)
        try:
            found = host.lstat()
        except FileNotFoundError:
            found = None
        if found is not None:
            if stat.S_ISCHR(found.st_mode) and found.st_rdev == os.makedev(major, minor):
                continue
            host.unlink()
        host.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(host, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        os.chmod(host, 0o666)  # past the umask: any container user may open it, as the driver's are
        made.append(path)
    return made
