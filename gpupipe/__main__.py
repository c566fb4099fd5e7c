from gpupipe.cli import entry

entry()
