import sys

from gpupipe.cli import main

# A normal exit, unlike the `gpupipe` console script (cli.entry): profilers and coverage write their files at exit.
sys.exit(main())
