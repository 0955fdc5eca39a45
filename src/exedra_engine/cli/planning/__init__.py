"""What `plan`, `emit` and `config --check` share beyond their command modules: the request
both commands build, the group plan and emit, `--measure`, and `config --check`'s run."""
