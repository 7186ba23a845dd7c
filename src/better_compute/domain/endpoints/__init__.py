"""Inference endpoints: endpoints, components, copies, relayout."""
