"""`pynvml` is imported by one module (`bcd/nvml.py`), and only when the real backend is built."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import better_compute

SRC = Path(better_compute.__file__).parent
IMPORT = re.compile(r"^\s*(import pynvml|from pynvml\b)", re.MULTILINE)


def test_only_the_real_backend_imports_pynvml() -> None:
    importers = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if IMPORT.search(p.read_text()))
    assert importers == ["bcd/nvml.py"]


def test_nothing_loads_pynvml_until_the_real_backend_is_built() -> None:
    probe = (
        "import sys\n"
        "import better_compute.entrypoints.bcd, better_compute.bcd.fake, better_compute.bcd.inventory\n"
        "import better_compute.bcd.nvml\n"
        "assert 'pynvml' not in sys.modules, 'pynvml loaded early'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
