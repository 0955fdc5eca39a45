"""Emitting a group plan (`GroupPlan`): llama.cpp's router preset, and a group's files for
the engines that run fleets. Pure, like the per-plan emitters it builds on."""
