"""better-compute: a GPU fleet control plane that books whole GPUs and their pieces as atoms."""

__version__ = "0.1.0"
