"""Admin override files: the YAML walk, the schema, the checker."""
