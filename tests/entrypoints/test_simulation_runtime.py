"""`serve --fleet --runtime`: which runtime the simulated nodes run containers with, and why."""

from __future__ import annotations

import pytest

from better_compute.entrypoints.simulation_runtime import RuntimeChoice, SimulationRuntime, choose_runtime

AUTO, PODMAN, FAKE = SimulationRuntime.auto, SimulationRuntime.podman, SimulationRuntime.fake


def chosen(
    asked: SimulationRuntime, *, on_path: bool = True, root: bool = True, driver: bool = False
) -> RuntimeChoice:
    return choose_runtime(asked, podman="podman", podman_on_path=on_path, root=root, nvidia_driver=driver)


def test_auto_takes_podman_only_where_it_is_installed_the_server_is_root_and_no_driver_is_loaded() -> None:
    assert chosen(AUTO) == RuntimeChoice(
        "podman", "podman is on PATH, the server is root and no NVIDIA driver is loaded"
    )
    assert chosen(AUTO, on_path=False) == RuntimeChoice("fake", "podman is not on PATH")
    assert chosen(AUTO, root=False) == RuntimeChoice(
        "fake", "the server is not root (device nodes need mknod)"
    )
    on_gpu = chosen(AUTO, driver=True)
    assert on_gpu.kind == "fake" and "NVIDIA driver is loaded" in on_gpu.reason
    assert chosen(AUTO, on_path=False, root=False, driver=True).reason.count(";") == 2


def test_fake_is_taken_when_asked_for_whatever_the_machine() -> None:
    assert chosen(FAKE) == RuntimeChoice("fake", "asked for (--runtime fake)")
    assert chosen(FAKE, on_path=False, root=False, driver=True).kind == "fake"


def test_podman_asked_for_is_refused_with_why_where_it_cannot_be_had() -> None:
    assert chosen(PODMAN) == RuntimeChoice("podman", "asked for (--runtime podman)")
    with pytest.raises(ValueError, match="podman is not on PATH"):
        chosen(PODMAN, on_path=False)
    with pytest.raises(ValueError, match="not root"):
        chosen(PODMAN, root=False)
    # Never on a machine with a real GPU: the simulated device nodes would be its.
    with pytest.raises(ValueError, match="NVIDIA driver is loaded"):
        chosen(PODMAN, driver=True)
