"""``python -m pynox`` is the ``pynox`` command."""

import sys

from pynox.cli import main

sys.exit(main())
