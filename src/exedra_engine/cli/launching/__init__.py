"""What `launch` and `demo` run once their signals are honoured: the runs, the group launch, the
ready lines, the signal watchers."""
