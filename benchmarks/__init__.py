"""Side-by-side benchmarks of tinycoro against asyncio, uvloop and aiofiles.

``python -m benchmarks [--quick] [--only NAME ...] [--out FILE | --publish]``: the report goes
to build/benchmarks/benchmarks.md, or with ``--publish`` to the tracked docs/benchmarks.md (the
latest run of each Python version, ``--python X.Y`` running on another one), with every row on
docs/benchmarks-full.md, the runs stored in docs/benchmarks-runs.json and the profiles on
docs/benchmarks-profiles.md; see :mod:`benchmarks.runner` and :mod:`benchmarks.report`. One module per workload (``w_*.py``), one shared harness
(:mod:`benchmarks.harness`) for repetitions, medians, ratios and tables.
"""
