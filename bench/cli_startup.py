"""Start-up time of the CLI: `better-compute gpus --json` and `better-compute --help`, end to end, as a
shell runs them.

Every CLI call pays for what the console script imports before it does anything, so this runs the
installed `better-compute` (next to this interpreter) as a fresh process several times and keeps the
median, and reports whether such a call imported server code (SQLAlchemy, Alembic, psycopg, FastAPI,
uvicorn or better-compute's api, service and storage packages). The goal is under 0.3 s.

    .venv/bin/python bench/cli_startup.py --quick

The last line is one JSON object: gpus_json_s (median), gpus_json_min_s, runs, imports_server_code,
server_modules, help_s (the median of `--help`) and help_min_s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_S = 0.3
SERVER_PACKAGES = (
    "sqlalchemy",
    "alembic",
    "psycopg",
    "fastapi",
    "uvicorn",
    "better_compute.api",
    "better_compute.service",
    "better_compute.storage",
)
PROBE = """
import contextlib, io, json, sys
from better_compute.entrypoints.cli import main
sys.argv = ["better-compute", "gpus", "--json"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def command(*args: str) -> list[str]:
    """The installed console script, or the module when there is none (a checkout without `pip -e`)."""
    script = Path(sys.executable).with_name("better-compute")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "better_compute.entrypoints.cli", *args]


def run_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def server_modules() -> list[str]:
    """The server modules a `gpus --json` call imports (none, when the CLI is as it should be)."""
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    loaded: list[str] = json.loads(out.splitlines()[-1])
    return sorted(
        {
            name
            for name in loaded
            for package in SERVER_PACKAGES
            if name == package or name.startswith(package + ".")
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 runs instead of 20 (a few seconds)")
    args = parser.parse_args()
    runs = 5 if args.quick else 20
    argv = command("gpus", "--json")
    help_argv = command("--help")
    run_once(argv)  # warm the file cache and the bytecode, as a second call in a shell would find them
    run_once(help_argv)
    times: list[float] = []
    help_times: list[float] = []
    for _ in range(runs):  # alternated, so that a busy moment of the machine falls on both alike
        times.append(run_once(argv))
        help_times.append(run_once(help_argv))
    loaded = server_modules()
    median = statistics.median(times)
    for shown, taken in ((argv, times), (help_argv, help_times)):
        print(f"{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(shown))}: {runs} runs")
        print(
            f"  median {statistics.median(taken):.3f} s, min {min(taken):.3f} s, max {max(taken):.3f} s"
            f" (goal: under {GOAL_S} s)"
        )
    print(f"  server modules imported by gpus --json: {', '.join(loaded) if loaded else 'none'}")
    print(f"command: .venv/bin/python bench/cli_startup.py{' --quick' if args.quick else ''}")
    print(
        json.dumps(
            {
                "gpus_json_s": round(median, 4),
                "gpus_json_min_s": round(min(times), 4),
                "runs": runs,
                "imports_server_code": bool(loaded),
                "server_modules": loaded,
                "help_s": round(statistics.median(help_times), 4),
                "help_min_s": round(min(help_times), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
