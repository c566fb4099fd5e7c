import sys

from gpupipe.cli import main

sys.exit(main())
