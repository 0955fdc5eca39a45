"""The shells: gather facts through the ports (`exedra_engine._shell.ports`), then call the
pure core."""
