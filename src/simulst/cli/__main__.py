"""``python -m simulst.cli``: the ``simulst`` command."""

import sys

from simulst.cli.main import main

sys.exit(main())
