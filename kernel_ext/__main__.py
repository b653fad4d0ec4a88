"""``python -m kernel_ext install [--user]``: see :mod:`kernel_ext.install`."""

import sys

from .install import main

sys.exit(main())
