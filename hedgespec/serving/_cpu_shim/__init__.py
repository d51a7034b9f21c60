"""Directory put on ``PYTHONPATH`` for ``device=cpu`` servers only; it holds the ``sgl_kernel`` shim."""
