"""What the wheel ships: every package-data pattern in pyproject.toml names files that exist, and the
files the code reads at run time (the GPU catalog's tables) are among them, so an installed server
finds its catalog as a checkout does."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_data() -> dict[str, list[str]]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data: dict[str, list[str]] = pyproject["tool"]["setuptools"]["package-data"]
    return data


def test_every_package_data_pattern_names_files_that_exist() -> None:
    for package, patterns in package_data().items():
        base = ROOT / "src" / package.replace(".", "/")
        for pattern in patterns:
            assert any(p.is_file() for p in base.glob(pattern)), f"{package}: {pattern} names no file"


def test_the_catalog_tables_are_package_data() -> None:
    patterns = package_data()["better_compute"]
    for table in ("models.toml", "placements.toml"):
        path = f"domain/catalog/{table}"
        assert (ROOT / "src" / "better_compute" / path).is_file(), path
        assert any(fnmatch(path, pattern) for pattern in patterns), f"{path} is not shipped"
