"""What a database can refuse: errors of opening and writing, and rows that cannot be read."""

from autotune.db.models import SCHEMA_VERSION


class StoreError(RuntimeError):
    """A database cannot be opened or written as asked."""


class SchemaVersionError(StoreError):
    """A database was written with another schema version than this autotune expects."""

    def __init__(self, where: str, found: int, expected: int = SCHEMA_VERSION) -> None:
        newer = isinstance(found, int) and found > expected
        super().__init__(
            f"{where} has schema version {found}, this autotune expects version {expected}"
            + (" (it was written by a newer autotune: upgrade autotune to read it)" if newer else "")
        )
        self.found = found
        self.expected = expected


class MergeError(StoreError):
    """Rows of a database to merge cannot be taken as they are: none of the files is merged."""


class UnreadableRowWarning(UserWarning):
    """A stored row cannot be read (a date that does not parse, text where a number belongs): it is skipped
    alone, the other rows are read."""
