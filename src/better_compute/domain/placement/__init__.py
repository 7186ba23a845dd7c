"""Placement across clusters (docs/placement.md; seed 001): pure rules over a snapshot, no I/O."""
