"""The pure planner: layers, the merge, the endpoint read back, the files a plan loads."""
