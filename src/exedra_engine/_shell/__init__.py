"""The shells: gather facts through the ports (`exedra_engine._shell.local.ports`), then call the
pure core."""
