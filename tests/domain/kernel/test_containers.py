"""The container a replica or a copy runs, checked (domain.kernel.containers)."""

from __future__ import annotations

import pytest

from better_compute.domain.kernel.containers import check_image, parse_container
from better_compute.domain.kernel.errors import InvalidInput


@pytest.mark.parametrize(
    "image", ["oci-archive:foo", "dir:tmp", "docker-archive:x", "oci:layout", "containers-storage:x", "sif:a"]
)
def test_an_image_spelt_as_a_transport_that_reads_node_files_is_refused(image: str) -> None:
    with pytest.raises(InvalidInput, match="transport"):
        check_image(image)


@pytest.mark.parametrize(
    "image",
    [
        "docker:24",
        "busybox",
        "registry.example:5000/team/model:1.2",
        "localhost/demo:1",
        "a/b@sha256:" + "0" * 64,
    ],
)
def test_registry_and_store_references_are_taken(image: str) -> None:
    assert check_image(image).path


@pytest.mark.parametrize("cpu", ["1_0", "1e3", "-1", "0x10", " 2", "inf", "nan"])
def test_a_cpu_string_with_underscores_signs_or_exponents_is_refused(cpu: str) -> None:
    with pytest.raises(InvalidInput, match="cpu"):
        parse_container({"image": "x", "resources": {"cpu": cpu}})


@pytest.mark.parametrize(("cpu", "cores"), [("500m", 0.5), ("0.25", 0.25), ("2", 2.0), (4, 4.0)])
def test_cpu_as_cores_or_millicores(cpu: object, cores: float) -> None:
    assert parse_container({"image": "x", "resources": {"cpu": cpu}}).cpu == cores


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("env", {"NVIDIA_VISIBLE_DEVICES": "all"}),
        ("env", {"CUDA_VISIBLE_DEVICES": "0"}),
        ("env", {"BC_DEVICE_UUIDS": "x"}),
        ("env", {"A-B": "x"}),
        ("command", ["x"] * 65),
        ("ports", [{"containerPort": 80}, {"containerPort": 80}]),
        ("readinessProbe", {"httpGet": {"path": "/", "port": 80}, "exec": {"command": ["true"]}}),
        ("readinessProbe", {"httpGet": {"path": "no-slash", "port": 80}}),
        ("readinessProbe", {"httpGet": {"path": "/", "port": 80}, "periodSeconds": True}),
    ],
)
def test_bad_containers_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_container({"image": "x", field: value})
    assert refused.value.details["field"].startswith(f"container.{field}")


def test_a_container_round_trips_through_its_document() -> None:
    spec = parse_container(
        {
            "image": "localhost/demo:1",
            "command": ["sh", "-c", "exec httpd"],
            "env": {"MODEL": "a"},
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 2},
            "resources": {"cpu": "250m", "memoryMiB": 64},
        }
    )
    assert parse_container(spec.document()) == spec
