"""Several executors on one host: the members, the shares a group plan decides, the plan."""
