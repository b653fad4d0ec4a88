"""Side-by-side benchmarks of tinycoro against asyncio, uvloop and aiofiles.

``python -m benchmarks [--quick] [--only NAME ...] [--out FILE | --publish]``: the report goes
to build/benchmarks/benchmarks.md, or with ``--publish`` to the tracked docs/benchmarks.md (one part
per Python version; ``--python X.Y`` runs on another one) and docs/benchmarks-profiles.md; see
:mod:`benchmarks.runner`. One module per workload (``w_*.py``), one shared harness
(:mod:`benchmarks.harness`) for repetitions, medians, ratios and tables.
"""
