"""The pure core: every rule of the domain, with no I/O, clock or randomness of its own."""
