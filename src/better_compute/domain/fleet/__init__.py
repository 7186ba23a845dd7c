"""Clusters, nodes, GPUs, pools and their atoms, and what nodes report."""
