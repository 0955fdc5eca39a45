"""The trio adapter: start, watch and stop executor processes."""
