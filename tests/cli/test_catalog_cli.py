"""`better-compute gpus`, `layouts …` and `advise`: output shapes and exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from better_compute.cli.app import app
from better_compute.domain.endpoints.commands import parse_component

runner = CliRunner()


def _json(args: list[str], code: int = 0) -> object:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_gpus_json_lists_the_catalog() -> None:
    models = _json(["gpus", "--json"])
    assert isinstance(models, list)
    by_id = {m["id"]: m for m in models}
    assert by_id["H100-80GB"]["computeSlices"] == 7
    assert by_id["RTX-PRO-6000"]["placementUnits"] == 12
    assert by_id["L40S-48GB"]["migCapable"] is False
    profile = next(p for p in by_id["A100-40GB"]["profiles"] if p["name"] == "1g.10gb")
    assert profile == {
        "name": "1g.10gb",
        "profileId": 15,
        "computeSlices": 1,
        "memorySlices": 2,
        "memoryGiB": 9.62,
        "maxInstances": 4,
        "starts": [0, 2, 4, 6],
        "size": 2,
        "minDriver": "525",
        "multiprocessors": 14,
        "aliases": [],
    }


def test_gpus_json_says_placements_confirmed_only_where_a_real_lgipp_was_read() -> None:
    """Issue 11, defect 17: the A100 80GB, B200 and GB200 placements are inferred."""
    models = _json(["gpus", "--json"])
    assert isinstance(models, list)
    confirmed = {m["id"]: m["placementsConfirmed"] for m in models if m["migCapable"]}
    for inferred in ("A100-80GB", "B200-180GB", "GB200-186GB", "RTX-PRO-4500"):
        assert confirmed[inferred] is False, inferred
    for captured in ("A100-40GB", "A30-24GB", "H100-80GB", "H100-94GB", "H200-141GB", "RTX-PRO-6000"):
        assert confirmed[captured] is True, captured


def test_gpus_table() -> None:
    result = runner.invoke(app, ["gpus"])
    assert result.exit_code == 0
    assert "H100-80GB" in result.stdout and "RTX-6000-ADA" in result.stdout


def test_validate_json_valid() -> None:
    body = _json(["layouts", "validate", "--gpu", "h100-80gb", "mixed:4g.40gb+2g.20gb+1g.10gb", "--json"])
    assert body["valid"] is True  # type: ignore[index]
    assert body["placement"] == [  # type: ignore[index]
        {"profile": "4g.40gb", "start": 0, "size": 4},
        {"profile": "2g.20gb", "start": 4, "size": 2},
        {"profile": "1g.10gb", "start": 6, "size": 1},
    ]


def test_validate_json_refused_exits_2() -> None:
    body = _json(["layouts", "validate", "--gpu", "H100-80GB", "mixed:2x3g.40gb+1g.10gb", "--json"], code=2)
    assert body["valid"] is False  # type: ignore[index]
    error = body["error"]  # type: ignore[index]
    assert error["code"] == "INVALID_INPUT"
    assert "1g.10gb" in error["message"]
    assert "placement" not in body  # type: ignore[operator]


def test_validate_table_and_diagram() -> None:
    result = runner.invoke(app, ["layouts", "validate", "--gpu", "RTX-PRO-6000", "mixed:2x1g.24gb+2g.48gb"])
    assert result.exit_code == 0, result.output
    assert "is valid on RTX-PRO-6000" in result.stdout
    assert "[          2g.48gb           ][   1g.24gb   ][   1g.24gb   ]" in result.stdout


def test_validate_refused_prints_the_error_and_exits_2() -> None:
    result = runner.invoke(
        app, ["layouts", "validate", "--gpu", "A100-40GB", "all-1g.10gb", "--driver", "470.256.02"]
    )
    assert result.exit_code == 2
    assert "R525" in result.stderr


def test_validate_unknown_model_exits_2() -> None:
    result = runner.invoke(app, ["layouts", "validate", "--gpu", "Z9000", "all-disabled", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "NOT_FOUND"


def test_list_profiles() -> None:
    body = _json(["layouts", "list", "--gpu", "A30-24GB", "--json"])
    assert body["placementUnits"] == 4  # type: ignore[index]
    assert [p["name"] for p in body["profiles"]] == [
        "1g.6gb",
        "1g.6gb+me",
        "2g.12gb",
        "2g.12gb+me",
        "4g.24gb",
    ]  # type: ignore[index]
    table = runner.invoke(app, ["layouts", "list", "--gpu", "H100-80GB"])
    assert table.exit_code == 0 and "3g.40gb" in table.stdout
    non_mig = runner.invoke(app, ["layouts", "list", "--gpu", "L4-24GB"])
    assert non_mig.exit_code == 0 and "does not support MIG" in non_mig.stdout


def test_export_and_import_round_trip(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "layouts",
            "export",
            "--gpu",
            "H100-80GB",
            "mixed:3g.40gb+2x2g.20gb",
            "--format",
            "mig-parted",
            "--name",
            "pool-a",
        ],
    )
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert data["mig-configs"]["pool-a"][0]["mig-devices"] == {"3g.40gb": 1, "2g.20gb": 2}
    path = tmp_path / "config.yaml"
    path.write_text(result.stdout)
    imported = runner.invoke(
        app, ["layouts", "import", str(path), "--config", "pool-a", "--gpu", "H100-80GB"]
    )
    assert imported.exit_code == 0, imported.output
    assert imported.stdout.strip() == "mixed:3g.40gb+2x2g.20gb"
    refused = runner.invoke(app, ["layouts", "import", str(path), "--config", "pool-a", "--gpu", "A100-40GB"])
    assert refused.exit_code == 2


NVIDIA_PER_INDEX = """\
version: v1
mig-configs:
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
"""


def test_import_prints_nvidias_all_enabled_and_per_index_configs(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(NVIDIA_PER_INDEX)
    for env in ({"COLUMNS": "80"}, {}):
        result = CliRunner(env=env).invoke(
            app, ["layouts", "import", str(path), "--config", "custom-config", "--gpu", "A100-40GB"]
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == ["GPU 0,1,2,3: all-disabled", "GPU 4: mixed:7x1g.5gb"]
        enabled = CliRunner(env=env).invoke(
            app, ["layouts", "import", str(path), "--config", "all-enabled", "--gpu", "A100-40GB"]
        )
        assert enabled.exit_code == 0, enabled.output
        assert enabled.stdout.splitlines() == ["all GPUs: MIG enabled, no instances"]
    assert _json(
        ["layouts", "import", str(path), "--config", "custom-config", "--gpu", "A100-40GB", "--json"]
    ) == {
        "config": "custom-config",
        "model": "A100-40GB",
        "layout": None,
        "devices": [
            {"devices": [0, 1, 2, 3], "migEnabled": False, "layout": "all-disabled"},
            {"devices": [4], "migEnabled": True, "layout": "mixed:7x1g.5gb"},
        ],
    }


def test_import_index_prints_the_layout_one_gpu_of_a_per_index_config_gets(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(NVIDIA_PER_INDEX)
    base = ["layouts", "import", str(path), "--config", "custom-config", "--gpu", "A100-40GB", "--index"]
    for env in ({"COLUMNS": "80"}, {}):
        four = CliRunner(env=env).invoke(app, [*base, "4"])
        assert four.exit_code == 0, four.output
        assert four.stdout == "mixed:7x1g.5gb\n"
        two = CliRunner(env=env).invoke(app, [*base, "2"])
        assert two.stdout == "all-disabled\n"
        none = CliRunner(env=env).invoke(app, [*base, "9"])
        assert none.exit_code == 2
        assert "names no GPU index 9" in none.output
    assert _json([*base, "4", "--json"])["layout"] == "mixed:7x1g.5gb"


def test_export_names_a_mixed_layout_after_its_instances() -> None:
    result = runner.invoke(app, ["layouts", "export", "--gpu", "H100-80GB", "mixed:3g.40gb+2x2g.20gb"])
    assert result.exit_code == 0, result.output
    assert list(yaml.safe_load(result.stdout)["mig-configs"]) == ["custom-3g.40gb-2x2g.20gb"]


def test_export_partition_types_and_refusal() -> None:
    assert _json(
        ["layouts", "export", "--gpu", "A100-40GB", "all-3g.20gb", "--format", "partition-types"]
    ) == [
        "mig-3g.20gb",
        "mig-3g.20gb",
    ]
    refused = runner.invoke(app, ["layouts", "export", "--gpu", "A100-40GB", "mixed:2x4g.20gb"])
    assert refused.exit_code == 2


def test_advise_json_shape_and_reference_case() -> None:
    # The reference case of docs/layouts.md#sizing-advisor: 8B in FP16, 8,000 tokens, one sequence.
    body = _json(
        [
            "advise",
            "--model",
            "Llama-3.1-8B",
            "--dtype",
            "fp16",
            "--context",
            "8000",
            "--concurrency",
            "1",
            "--json",
        ]
    )
    memory = body["memory"]  # type: ignore[index]
    assert set(memory) >= {"weightsGiB", "kvCacheGiB", "overheadGiB", "totalGiB"}
    assert memory["overheadGiB"] == 1.5
    fits = body["fits"]  # type: ignore[index]
    assert {"gpu", "profile", "headroomGiB"} <= set(fits[0])
    assert any(f["gpu"] == "H100-80GB" and f["profile"] == "3g.40gb" and f["headroomGiB"] > 20 for f in fits)
    assert any(f["gpu"] == "L40S-48GB" and f["profile"] is None for f in fits)


def test_advise_explicit_architecture_gpu_and_price() -> None:
    body = _json(
        [
            "advise",
            "--params",
            "8",
            "--layers",
            "32",
            "--kv-heads",
            "8",
            "--head-dim",
            "128",
            "--dtype",
            "fp8",
            "--context",
            "4096",
            "--concurrency",
            "8",
            "--gpu",
            "H100-80GB",
            "--price",
            "H100-80GB=63.296/8",
            "--overhead",
            "2",
            "--json",
        ]
    )
    fits = {f["profile"]: f for f in body["fits"]}  # type: ignore[index]
    assert fits["3g.40gb"]["costPerUnitHour"] == round(63.296 / 16, 6)
    assert body["memory"]["overheadGiB"] == 2  # type: ignore[index]


def test_advise_table() -> None:
    result = runner.invoke(app, ["advise", "--model", "mistral-7b", "--context", "2048", "--gpu", "A30-24GB"])
    assert result.exit_code == 0, result.output
    assert "KV cache" in result.stdout


def test_advise_needs_a_model() -> None:
    result = runner.invoke(app, ["advise", "--context", "2048"])
    assert result.exit_code == 2
    unknown = runner.invoke(app, ["advise", "--model", "nope", "--context", "2048"])
    assert unknown.exit_code == 2
    bad_price = runner.invoke(app, ["advise", "--model", "mistral-7b", "--context", "1", "--price", "H100"])
    assert bad_price.exit_code == 2


def test_advise_table_fits_80_columns_best_first_and_all_for_the_rest() -> None:
    # Defect 3 of issue 11: at 80 columns advise cut its headers ("headr…", "$/un…") and GPU names.
    args = ["advise", "--model", "Llama-3.1-8B", "--context", "8000", "--price", "H100-80GB=63.296/8"]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("gpu"))
    assert header.split() == [
        "gpu",
        "partition",
        "GiB",
        "headroom",
        "max",
        "ctx",
        "max",
        "seqs",
        "per",
        "GPU",
        "$/unit-h",
    ]
    assert "…" not in result.stdout
    assert all(len(line) <= 80 for line in lines[1:])
    rows = lines[lines.index(header) + 1 :]
    assert rows[-1].endswith("more: --all")
    shown = rows[:-1]
    assert len(shown) == 10 and shown[0].split()[:2] == ["A100-40GB", "3g.20gb"]
    everything = runner.invoke(app, [*args, "--all"], env={"COLUMNS": "80"})
    assert "more: --all" not in everything.stdout
    total = len(_json([*args, "--json"])["fits"])  # type: ignore[arg-type,index]
    assert rows[-1] == f"{total - 10} more: --all"


def test_advise_preset_with_other_params_is_labelled_as_computed() -> None:
    # Defect 10 of issue 11: --model Llama-3.1-8B --params 70 kept the 8B label with 70B weights.
    args = ["advise", "--model", "Llama-3.1-8B", "--params", "70", "--context", "8000"]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Llama-3.1-8B with params 70B in fp16")
    body = _json([*args, "--json"])
    assert body["model"]["name"] == "Llama-3.1-8B with params 70B"  # type: ignore[index]
    assert body["model"]["paramsB"] == 70  # type: ignore[index]
    same = _json(["advise", "--model", "Llama-3.1-8B", "--params", "8.03", "--context", "8000", "--json"])
    assert same["model"]["name"] == "Llama-3.1-8B"  # type: ignore[index]


MODELS_FILE = {
    "models": [
        {"name": "summarizer", "model": "Llama-3.1-8B", "context": 8000, "copies": 2},
        {"name": "embedder", "model": "bge-large-en-v1.5", "context": 512, "concurrency": 8, "copies": 4},
        {"name": "chat", "model": "Qwen2.5-14B", "context": 4000, "concurrency": 4},
    ]
}


def test_advise_endpoint_proposes_the_cheapest_endpoint_in_the_shape_endpoints_create_takes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(MODELS_FILE))
    prices = ["--price", "A100-40GB=25.251286/8", "--price", "H100-80GB=63.296/8"]
    body = _json(["advise", "--endpoint", str(path), *prices, "--json"])
    proposal = body["proposal"]  # type: ignore[index]
    assert proposal["gpu"] == "A100-40GB" and proposal["pricePerHour"] == 25.251286
    assert proposal["variant"] == {
        "instanceCount": 1,
        "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": ["mig-7g.40gb"]}],
        "pricePerInstanceHour": 25.251286,
    }
    assert [c["name"] for c in proposal["components"]] == ["summarizer", "embedder", "chat"]
    for made in proposal["components"]:  # what components create takes, once the endpoint is named
        parse_component({**made, "endpointName": "e", "variantName": "AllTraffic"})
    assert proposal["headroomGiB"]["chat"] == 7.439
    h100 = body["plans"][1]  # type: ignore[index]
    assert {c["name"]: c["partitionType"] for c in h100["components"]}["chat"] == "mig-3g.40gb"
    chat = body["models"][2]  # type: ignore[index]
    option = next(o for o in chat["options"] if o["gpu"] == "H100-80GB" and o["profile"] == "3g.40gb")
    assert option["costPerUnitHour"] == round(63.296 / 16, 6)
    table = runner.invoke(app, ["advise", "--endpoint", str(path), *prices], env={"COLUMNS": "100"})
    assert table.exit_code == 0, table.output
    assert "proposed: 1 × A100-40GB instance (8 GPUs each) at $25.25/h" in table.stdout


def test_advise_endpoint_reads_stdin_and_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    piped = runner.invoke(
        app, ["advise", "--endpoint", "-", "--gpu", "H100-80GB", "--json"], input=json.dumps(MODELS_FILE)
    )
    assert piped.exit_code == 0, piped.output
    assert json.loads(piped.stdout)["proposal"]["gpu"] == "H100-80GB"
    bad = runner.invoke(app, ["advise", "--endpoint", "-", "--json"], input='{"models": [{"context": 1}]}')
    assert bad.exit_code == 2
    assert json.loads(bad.stdout)["error"]["details"]["field"] == "models[0].model"
    mixed = runner.invoke(app, ["advise", "--endpoint", "-", "--model", "Mistral-7B"], input="{}")
    assert mixed.exit_code == 2 and "each model is described in the file" in mixed.output
    missing = runner.invoke(app, ["advise", "--endpoint", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2
    not_yaml = runner.invoke(app, ["advise", "--endpoint", "-"], input="models: [")
    assert not_yaml.exit_code == 2 and "not YAML or JSON" in not_yaml.stderr
    huge = tmp_path / "huge.yaml"
    huge.write_text("#" * (2 << 20))
    too_big = runner.invoke(app, ["advise", "--endpoint", str(huge), "--json"])
    assert too_big.exit_code == 2 and "over 1048576 characters" in too_big.stdout


def test_advise_endpoint_runs_on_the_readmes_example_file() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "endpoint-models.yaml"
    body = _json(["advise", "--endpoint", str(path), "--price", "H100-80GB=63.296/8", "--json"])
    assert body["proposal"]["gpu"] == "H100-80GB"  # type: ignore[index]
    assert len(body["models"]) == 3  # type: ignore[index]
