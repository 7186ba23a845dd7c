"""Placement across clusters (SPEC 8): the pure rules that decide which clusters a workload may use."""
