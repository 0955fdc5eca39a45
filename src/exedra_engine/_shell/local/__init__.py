"""This machine through the ports: the real host adapter, safe file opens, path modes, the
executor cache and each installed binary's own flag table."""
