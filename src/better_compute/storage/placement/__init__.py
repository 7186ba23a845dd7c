"""Placement across clusters: device classes, workloads, capability, fair share, preemption."""
