"""The adapter to a Slurm cluster: `SlurmControl` (service/fleet/slurm.py) over the Slurm commands.

Only the entry points import it (an import-linter contract), as they wire every adapter of the outside
world."""
