"""Whether the op catalog knows an op, and the refusal of a user's own op whose
``--ops-module`` is not loaded (numpy-free and pandas-free: the estimator's warm path asks it)."""

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
