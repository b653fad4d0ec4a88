"""``python -m tinycoro.kernel_ext install [--user]``: see :mod:`tinycoro.kernel_ext.install`."""

import sys

from .install import main

sys.exit(main())
