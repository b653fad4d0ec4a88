"""What test modules import (fixtures stay in tests/conftest.py; no test module imports another):

- ``runtime``: context counts, open descriptors and tinycoro threads, ``wait_until`` (a runtime
  state from a plain thread), ``switch_interval``, ``in_eventfd_read``, ``cancel_and_wait``;
- ``sync``: run on N contexts, ``until``, ``spawn_here``, ``settle`` (the sync/channel tests);
- ``stateful``: the hypothesis state-machine frame of tests/test_stateful_*.py;
- ``streams``: ``tcp_pair``; ``tls``: ``tls_pair`` (with conftest's certificate fixtures);
- ``shell``: the in-process IPython shell with tinycoro loaded; ``cells``: cell code shared by
  the in-process and the real-kernel notebook tests; ``kernel``: a real kernel over
  jupyter_client, and the interrupt steps;
- ``cluster``: started clusters and their processes; ``cluster_tasks``: the functions shipped
  to engines (imported there by module name, so tests/ is put on the engines' PYTHONPATH).
"""
