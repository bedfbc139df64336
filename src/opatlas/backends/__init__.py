"""Backends execute one op vector on a device and return raw timings (ns per repeat)."""

from opatlas.backends.base import Backend, get_backend, list_backends, register_backend

__all__ = ["Backend", "get_backend", "list_backends", "register_backend"]
