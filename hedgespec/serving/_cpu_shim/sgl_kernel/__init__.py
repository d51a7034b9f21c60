"""``sgl_kernel`` shim for SGLang on a CPU without the source-built CPU sgl-kernel (hedgespec, device=cpu).

This directory is on ``PYTHONPATH`` only for servers started by ``hedgespec.serving`` with ``device=cpu``
(never on GPU installs, where the real ``sgl_kernel`` from ``sglang-kernel`` must be used). Importing it
registers the pure-torch ops of :mod:`hedgespec.serving.cpu_kernels`; any other name resolves to a function
that raises ``NotImplementedError`` naming the op, so SGLang's import-time ``from sgl_kernel import X``
succeeds and only a real call to an unsupported op fails, loudly.
"""

from __future__ import annotations

from hedgespec.serving import cpu_kernels as _ck

_ck.install()
globals().update(_ck.OPS)
__version__ = "0.0.0+hedgespec.cpu." + _ck.SGLANG_VERSION


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def _missing(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} is not provided by the hedgespec CPU kernels (sglang {_ck.SGLANG_VERSION}); "
            "this model/feature needs a GPU or the source-built CPU sgl-kernel"
        )

    _missing.__name__ = name
    return _missing
