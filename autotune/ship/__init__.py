"""Shipping rows between databases: merging others' files into one, every row checked against its kernel first."""
