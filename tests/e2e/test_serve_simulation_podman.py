"""`serve --fleet --runtime podman`: the simulated nodes run a workload replica in a real podman
container (runc, from the containers.conf `clean_env` names) holding its MIG atom's CDI device. Each
node's simulated driver makes its device nodes (`/dev/nvidia<minor>`, the control and UVM nodes, a
capability node per MIG instance) in its tree, and the specs go to /var/run/cdi, where podman reads
them. Needs podman, runc, root, no NVIDIA driver and Debian's busybox-static (the demo image is
built from it): without them the test skips saying which is missing, except under CI (`CI=true`),
where it fails."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from better_compute.bcd import cdi
from better_compute.bcd.containers import container_name
from better_compute.entrypoints import demo_image
from better_compute.entrypoints.simulation_runtime import NVIDIA_DRIVER
from tests.e2e.conftest import clean_env, start_server
from tests.e2e.test_bcd_loop import eventually
from tests.e2e.test_serve_simulation import nodes_dir, replica_states

CDI_ROOT = Path("/var/run/cdi")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the podman simulation test cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (apt-get install podman runc)")
    if os.geteuid() != 0:
        _unavailable("the simulated nodes make device nodes (mknod) and write /var/run/cdi: root only")
    if NVIDIA_DRIVER.exists():
        _unavailable("an NVIDIA driver is loaded: the simulation never runs podman on a GPU machine")
    try:
        return demo_image.build()
    except RuntimeError as exc:
        _unavailable(str(exc))
        raise


def podman(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=120, check=False, env=clean_env(home)
    )


def test_a_mig_replica_runs_in_podman_with_its_device_nodes_and_answers(demo: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    container = {
        "image": demo,
        "ports": [{"containerPort": demo_image.PORT}],
        "readinessProbe": {"httpGet": {"path": "/ping", "port": demo_image.PORT}},
    }
    body = {
        "project": "platform",
        "name": "podman-served",
        "shape": {"deviceClass": "h100-3g.40gb", "deviceCount": 1, "container": container},
        "replicas": 1,
    }
    with start_server(home, options=["--runtime", "podman"]) as server:
        assert "containers run with podman (device nodes made, CDI specs in /var/run/cdi)" in server.output()
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        with httpx.Client(base_url=server.url, headers=admin, timeout=10) as http:
            made = http.post("/v1/workloads", json=body)
            assert made.status_code == 201, made.text
            wid = made.json()["id"]
            (dep,) = http.get(f"/v1/workloads/{wid}").json()["deployments"]
            replica = f"{dep['id']}.r0"

            def ready() -> tuple[str, str, str | None] | None:
                found = replica_states(server).get(replica)
                return found if found is not None and found[1] == "ready" else None

            node, _, address = eventually(ready, "the replica's podman container ready", bound=120)
            assert address
            # The node's simulated driver made its device nodes; the spec went to /var/run/cdi.
            tree = nodes_dir(server) / node / "node-root"
            for name in ("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools", "dev/nvidia0"):
                assert stat.S_ISCHR((tree / name).lstat().st_mode), name
            assert list((tree / "dev" / "nvidia-caps").iterdir())
            assert cdi.spec_path(CDI_ROOT, replica).is_file()
            # The container holds the MIG atom: its GPU, its two capability nodes, the driver's.
            name = container_name(node, replica)
            seen = podman("exec", name, "ls", "/dev", "/dev/nvidia-caps", home=home)
            assert seen.returncode == 0, seen.stderr
            assert "nvidiactl" in seen.stdout and len(seen.stdout.split("/dev/nvidia-caps:")[1].split()) == 2
            answer = httpx.post(f"http://{address}{demo_image.INVOKE_PATH}", content=b"hello", timeout=10)
            assert answer.status_code == 200, answer.text
            spec = cdi.read_spec(CDI_ROOT, replica)
            assert spec is not None
            env = spec["devices"][0]["containerEdits"]["env"]
            handed = dict(e.split("=", 1) for e in env)["BC_DEVICE_UUIDS"]
            assert answer.json()["devices"] == handed and handed.startswith("MIG-")
            assert http.delete(f"/v1/workloads/{wid}").status_code in (200, 204)
            # `removed`, or forgotten: the node reports `removed` before it releases the allocation,
            # and the server forgets the states of an allocation that ended.
            eventually(
                lambda: replica_states(server).get(replica, ("", "removed", None))[1] == "removed",
                "the container removed",
            )
            assert podman("container", "exists", name, home=home).returncode == 1
            eventually(lambda: not cdi.spec_path(CDI_ROOT, replica).exists(), "the CDI spec removed")
