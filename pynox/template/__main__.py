"""``python -m pynox.template FD SUPERVISOR_PID PRELOADS PACKAGE_DIRS``: started by the supervisor only."""

import sys

from pynox.template.main import main

sys.exit(main())
