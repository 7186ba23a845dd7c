"""api/routes."""
