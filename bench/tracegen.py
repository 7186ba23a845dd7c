"""A synthetic GPU-sharing trace with the columns of Alibaba's `cluster-trace-gpu-v2023` openb lists.

The real trace may be studied but not shipped (research-only terms), so `bench/replay.py --quick` and
anyone without it replays one of these. Request sizes and node kinds are drawn with the frequencies of
the openb default pod list and GPU node list (counted from those files: 48% of tasks ask for one whole
GPU, 13% for none, most others for a share of one GPU between 50 and 810 milli; G2 nodes of 8 GPUs and
T4 nodes of 2 make up three quarters of the nodes), and tasks are drawn until their GPU demand is 98%
of the fleet's GPUs, as in the default list (6,086.8 of 6,212 GPUs).

    python bench/tracegen.py OUT_DIR [--nodes 1213] [--seed 1] [--spec 0.0]

writes OUT_DIR/openb_pod_list_synthetic.csv and OUT_DIR/openb_node_list_gpu_node.csv.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

NODE_KINDS: tuple[tuple[str, int, int, int], ...] = (
    # model, GPUs, nodes in the openb GPU node list, cpu_milli
    ("G2", 8, 549, 96000),
    ("T4", 2, 387, 96000),
    ("P100", 2, 131, 64000),
    ("G3", 8, 39, 128000),
    ("V100M16", 4, 28, 96000),
    ("V100M32", 8, 21, 96000),
    ("V100M16", 1, 19, 32000),
    ("T4", 4, 17, 96000),
    ("V100M32", 4, 9, 96000),
    ("V100M16", 8, 8, 96000),
    ("P100", 1, 3, 32000),
    ("A10", 1, 2, 32000),
)

TASK_SHAPES: tuple[tuple[int, int, int], ...] = (
    # num_gpu, gpu_milli, tasks in the openb default pod list
    (1, 1000, 3911),
    (0, 0, 1088),
    (1, 810, 1078),
    (1, 470, 750),
    (1, 320, 328),
    (1, 650, 253),
    (1, 230, 140),
    (1, 460, 128),
    (1, 590, 75),
    (1, 160, 74),
    (1, 550, 72),
    (1, 220, 62),
    (1, 370, 47),
    (8, 1000, 44),
    (1, 110, 24),
    (1, 480, 19),
    (2, 1000, 16),
    (4, 1000, 15),
    (1, 50, 7),
    (1, 330, 7),
    (1, 350, 6),
    (1, 270, 4),
)

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time"
)
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
DEMAND_OF_CAPACITY = 0.98


def node_rows(count: int, rng: random.Random) -> list[str]:
    kinds = list(NODE_KINDS)
    weights = [k[2] for k in kinds]
    rows = []
    for i in range(count):
        model, gpus, _, cpu = rng.choices(kinds, weights)[0]
        rows.append(f"openb-node-{i:04},{cpu},{cpu * 4 * 1024 // 1000},{gpus},{model}")
    return rows


def pod_rows(capacity_milli: int, models: list[str], rng: random.Random, spec: float) -> list[str]:
    weights = [s[2] for s in TASK_SHAPES]
    rows: list[str] = []
    demand = 0
    t = 0
    while demand < DEMAND_OF_CAPACITY * capacity_milli:
        num_gpu, milli, _ = rng.choices(TASK_SHAPES, weights)[0]
        demand += num_gpu * milli
        t += rng.randint(1, 600)
        gpu_spec = ""
        if num_gpu and rng.random() < spec:
            gpu_spec = "|".join(sorted(rng.sample(models, k=rng.randint(1, min(2, len(models))))))
        cpu = 4000 * max(1, num_gpu) + rng.choice((0, 2000, 4000))
        times = f"{t},{t + 86400},{t}"
        rows.append(
            f"openb-pod-{len(rows):04},{cpu},{cpu * 2},{num_gpu},{milli},{gpu_spec},LS,Running,{times}"
        )
    return rows


def write_trace(out: Path, nodes: int = 1213, seed: int = 1, spec: float = 0.0) -> tuple[Path, Path]:
    """Write a synthetic pod list and node list into `out`; return their paths (pods, nodes)."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    node_lines = node_rows(nodes, rng)
    capacity = sum(int(line.split(",")[3]) for line in node_lines) * 1000
    models = sorted({line.split(",")[4] for line in node_lines})
    pods = out / "openb_pod_list_synthetic.csv"
    node_list = out / "openb_node_list_gpu_node.csv"
    pods.write_text("\n".join([POD_HEADER, *pod_rows(capacity, models, rng, spec)]) + "\n")
    node_list.write_text("\n".join([NODE_HEADER, *node_lines]) + "\n")
    return pods, node_list


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--nodes", type=int, default=1213, help="GPU nodes (the openb list has 1,213)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spec", type=float, default=0.0, help="share of GPU tasks given a gpu_spec")
    args = parser.parse_args()
    pods, nodes = write_trace(args.out, args.nodes, args.seed, args.spec)
    print(f"{pods}\n{nodes}")


if __name__ == "__main__":
    main()
