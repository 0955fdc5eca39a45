"""What `plan` and `emit` share beyond their command modules: the request both build, the group
plan and emit, `--measure`."""
