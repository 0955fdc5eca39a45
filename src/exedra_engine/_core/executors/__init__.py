"""The executors: each one's profile, the built-in set, the kinds, the argv reader and the flag
tables."""
