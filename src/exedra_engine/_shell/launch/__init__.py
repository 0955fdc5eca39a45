"""The launch sequence every adapter runs, and the ports it reaches processes through."""
