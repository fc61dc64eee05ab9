"""``python -m canopy_lit.serve``: ``canopy_lit.compress`` as an HTTP service (FastAPI + uvicorn, the ``serve`` extra).

One ``Compressor`` (one encoder and its node-embedding cache) per process, loaded before the port opens:

* ``POST /compress``: ``CompressRequest`` in (question, items, budget, descend_margin), ``CompressResponse``
  out (the evidence blocks, their item ids, the kept regions with node scores, token counts).
* ``GET /health``: the encoder, the adapter, the encoder fingerprint and the load (admitted, computing).
* ``GET /openapi.json`` (and ``/docs``): the JSON schema of both.

Errors are one line in ``{"detail": ...}``: 422 for a body the schema refuses (FastAPI's detail list), 400 for
input the library refuses (its ``TypeError`` / ``ValueError`` message, naming the item and field), 413 for a
body over ``--max-body-bytes`` or more than ``--max-items`` items, 408 for a body not received within
``--body-timeout``, 503 + ``Retry-After`` when ``--max-concurrency`` requests compute and ``--max-queue`` more
wait. Anything else is a 500 with a generic message; its traceback goes to the server log only.

``create_app`` (``canopy_lit.serve.app``) builds the application around a ``Compressor`` you loaded, for
running under your own ASGI server. How-to: docs/how-to/serve.md.
"""

from __future__ import annotations

__all__ = ["Limits", "create_app"]


def __getattr__(name: str) -> object:
    # ``import canopy_lit.serve`` (and ``python -m``) works without the extra, so ``__main__`` can say what
    # to install; FastAPI loads on first use.
    if name in __all__:
        from canopy_lit.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'canopy_lit.serve' has no attribute {name!r}")
