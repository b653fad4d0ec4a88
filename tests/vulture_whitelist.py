"""Names that vulture (run by tests/test_lint.py) reports as unused but that must stay.

Each is a parameter a protocol or a base class fixes: ``__aexit__``'s exception triple, a signal
handler's ``(signum, frame)``, ``argparse.ArgumentParser.exit(status, message)``. Naming them
here as attributes marks them used for vulture without adding anything pyflakes would flag.
"""

from types import SimpleNamespace

_ = SimpleNamespace()

_.exc_type  # __aexit__(self, exc_type, exc, tb)
_.exc_info  # __aexit__(self, *exc_info)
_.signum  # a signal handler's (signum, frame)
_.status # argparse.ArgumentParser.exit(status=0, message=None)
