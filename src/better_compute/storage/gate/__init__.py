"""MIG layout changes: the gate, partition holds, and the spec a node converges to."""
