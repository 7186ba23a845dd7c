"""Composition roots: the only place settings are read and real or fake parts are wired together."""
