"""`make demo-image`: a tiny model server image for the walkthroughs and the end-to-end tests, built
locally from Debian's static busybox (`apt-get install busybox-static`), so no registry is needed.

The image follows SageMaker's container contract as far as busybox's httpd allows: it listens on
8080, answers `GET /ping` with 200 and `POST /cgi-bin/invocations` (busybox runs POSTs only as CGI,
so components name it with `--invoke-path /cgi-bin/invocations`) with a JSON line naming the model
(`$MODEL`), the devices the node handed over (`$BC_DEVICE_UUIDS`) and the request's size. httpd logs
each request it answers (`-v`, one line on stderr: the peer and the status), so `workloads logs`
shows a replica's probes and requests. It holds nothing else: no package manager, no shell beyond busybox.

    python -m better_compute.entrypoints.demo_image [--tag localhost/better-compute-demo:1] [--podman podman]
"""

from __future__ import annotations

import argparse
import io
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

TAG = "localhost/better-compute-demo:1"
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "httpd", "cat", "echo", "env", "ls", "sleep", "wc", "true", "false", "test", "nc", "wget")
INVOKE_PATH = "/cgi-bin/invocations"
PORT = 8080

INVOCATIONS = """#!/bin/sh
# POST /cgi-bin/invocations: one JSON line naming the model and what it was handed.
size=0
[ -n "$CONTENT_LENGTH" ] && size=$CONTENT_LENGTH
cat > /dev/null
echo "Content-Type: application/json"
echo
echo "{\\"model\\": \\"${MODEL:-demo}\\", \\"devices\\": \\"${BC_DEVICE_UUIDS:-}\\", \\"bytes\\": $size}"
"""


def is_static(path: Path) -> bool:
    """Whether a 64-bit ELF executable has no interpreter (PT_INTERP): it runs in an image holding
    nothing else."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))


def _file(tar: tarfile.TarFile, name: str, text: str, mode: int = 0o644) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def write_tarball(target: Path, busybox: Path = BUSYBOX) -> None:
    """The image's root file system as a tarball."""
    with tarfile.open(target, "w") as tar:
        tar.add(busybox, "bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for d in ("tmp", "www", "www/cgi-bin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        _file(tar, "www/ping", "ok\n")
        _file(tar, "www/cgi-bin/invocations", INVOCATIONS, 0o755)


def build(tag: str = TAG, podman: list[str] | None = None, busybox: Path = BUSYBOX) -> str:
    """Import the image into podman under `tag`; returns the tag. RuntimeError says what is missing."""
    podman = podman or ["podman"]
    if shutil.which(podman[0]) is None:
        raise RuntimeError(f"{podman[0]} is not installed (apt-get install podman runc)")
    if not busybox.is_file() or not is_static(busybox):
        raise RuntimeError(f"{busybox} is not a static busybox (apt-get install busybox-static)")
    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        write_tarball(tarball, busybox)
        cmd = f'CMD ["/bin/httpd", "-f", "-v", "-p", "{PORT}", "-h", "/www"]'
        done = subprocess.run(
            [*podman, "import", "--change", cmd, "--change", f"EXPOSE {PORT}", str(tarball), tag],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"podman import failed: {done.stderr.strip()[:500]}")
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the demo model server image from busybox-static.")
    parser.add_argument("--tag", default=TAG)
    parser.add_argument("--podman", default="podman", help="the podman command (shell words)")
    args = parser.parse_args(argv)
    try:
        tag = build(args.tag, shlex.split(args.podman))
    except RuntimeError as exc:
        print(f"demo-image: {exc}", file=sys.stderr)
        return 1
    print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
