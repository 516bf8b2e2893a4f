"""One file per schema revision; ``0001`` is the initial schema."""
