"""Errors that carry enough context to be printed to a user as one paragraph."""

from __future__ import annotations


class OpatlasError(Exception):
    """Base class of every error opatlas raises on purpose (the CLI exits 2 on these)."""


class SpecError(OpatlasError):
    """A spec or config that cannot be used: names the file, the key and the bad value."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None,
                 value: object = None) -> None:
        self.file, self.key, self.value, self.detail = file, key, value, message
        where = []
        if file is not None:  # an option (--set, --megatron-args) is not called a file
            where.append(file if str(file).startswith("-") else f"file {file}")
        if key is not None:
            where.append(f"key '{key}'")
        if value is not None:
            where.append(f"value {value!r}")
        prefix = ("In " + ", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


class StoreError(OpatlasError):
    """A results store that cannot be opened or written; the file is left untouched."""


class UnknownOpError(OpatlasError):
    """An op name that is not in the registry."""


class InvalidShape(OpatlasError):
    """Raised by an op when a parameter vector is not a valid shape for it."""


class TooFewRows(OpatlasError):
    """Measured data too thin to fit a model on (fewer rows than ``opatlas fit`` evaluates)."""
