"""Placement across clusters (SPEC 8, seed 001): pure rules over a snapshot, no I/O."""
