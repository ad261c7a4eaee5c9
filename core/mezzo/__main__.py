"""``python -m mezzo`` is the ``mezzo`` command."""

import sys

from .cli.main import main

sys.exit(main())
