"""Whether the op catalog knows an op, the refusal of a user's own op whose ``--ops-module`` is
not loaded, and the note on a device outside the device catalog (numpy-free and pandas-free:
the estimator's warm path asks them)."""

from __future__ import annotations

from opatlas.errors import OpatlasError


def in_catalog(op: str) -> bool:
    """Whether the op catalog knows ``op`` by that name: a built-in op or alias, an entry
    point's, or one an ``--ops-module`` loaded in this process registered."""
    from opatlas.ops.registry import get_op

    try:
        get_op(op)
    except OpatlasError:
        return False
    return True


def module_needed(ops: list[str], why: str, hint: str = "") -> OpatlasError:
    """The refusal of ``ops`` the catalog lacks (:func:`uncatalogued`): ``why`` says what
    shows they are ops of the user's own; ``hint``: another way out."""
    one = len(ops) == 1
    return OpatlasError(f"{'op' if one else 'ops'} {', '.join(map(repr, ops))}: not in the "
                        f"catalog, though {why}: {'an op' if one else 'ops'} of your own; pass "
                        f"--ops-module FILE, the module that registers "
                        f"{'it' if one else 'them'} (as given to opatlas run), for "
                        f"{'its' if one else 'their'} defaults and counts{hint}")


def unknown_device_note(name: str, peak: float, bandwidth: float, dtype: str,
                        samples: int | None) -> str:
    """The one line that says a device outside the device catalog is described by what its
    own data attains (its roofline), whether its models are fitted now or loaded: the best
    FLOP/s and bytes/s of ``samples`` rows (None: not known, for models saved without it)."""
    from opatlas.console import fmt_si

    of = f", best of {samples} samples" if samples else ""
    return (f"device {name!r} is not in the catalog: described by what its own data attains "
            f"({fmt_si(peak, 'FLOP/s')} {dtype}, {fmt_si(bandwidth, 'B/s')}{of})")
