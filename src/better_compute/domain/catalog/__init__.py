"""domain/catalog."""
