"""The ``opatlas`` command: thin verbs over the Python API. It parses arguments and prints."""

from __future__ import annotations

import sys
from typing import Any

import typer

from opatlas.errors import OpatlasError

app = typer.Typer(
    name="opatlas",
    help="How fast tensor operators and training steps run on accelerators, and why.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _register() -> None:
    from opatlas.cli import (
        analyze_cmd,
        bound_cmd,
        collectives_cmd,
        demo_cmd,
        estimate_cmd,
        fit_cmd,
        results_cmd,
        run_cmd,
        sweep_cmd,
        tt_cmd,
    )

    app.add_typer(sweep_cmd.app, name="sweep")
    app.command("run")(run_cmd.run)
    app.command("results")(results_cmd.results)
    app.add_typer(results_cmd.import_app, name="import")
    app.command("ops")(sweep_cmd.ops)
    app.command("demo")(demo_cmd.demo)
    app.add_typer(bound_cmd.app, name="bound")
    app.command("collectives")(collectives_cmd.collectives)
    app.command("fit")(fit_cmd.fit)
    app.command("predict")(fit_cmd.predict)
    app.command("estimate")(estimate_cmd.estimate)
    app.command("calibrate")(tt_cmd.calibrate)
    app.command("reblock")(tt_cmd.reblock)
    app.command("analyze")(analyze_cmd.analyze)


_register()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    typer.echo(f"opatlas: warning: {message}", err=True)


def _click_exceptions():
    """The click exceptions typer raises: its own vendored copy (typer >= 0.20) or click's."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older typer on the public click
        from click import exceptions
    return exceptions


def _abort() -> type[BaseException]:
    """What click raises on Ctrl-C outside standalone mode: typer's own ``Abort`` (typer >=
    0.20 keeps it beside its vendored click, not in it) or click's."""
    try:
        from typer.exceptions import Abort
    except ImportError:  # pragma: no cover - older typer on the public click
        from click.exceptions import Abort
    return Abort


def _command() -> typer.core.TyperGroup:
    """The click command of ``app``. Typer labels every option with its type, a flag too
    (``--json <bool>``), which reads as if the flag took a value: flags get no label."""
    cmd = typer.main.get_command(app)

    def unlabel_flags(c) -> None:
        for param in c.get_params(typer.Context(c)):
            if getattr(param, "is_bool_flag", False):
                param.metavar = ""
        for sub in getattr(c, "commands", {}).values():
            unlabel_flags(sub)

    unlabel_flags(cmd)
    cmd.invoke = _quiet_on_closed_pipe(cmd.invoke)  # type: ignore[method-assign]
    return cmd


def _quiet_on_closed_pipe(invoke: Any) -> Any:
    """``invoke`` ending with exit 0 when the reader of standard output goes away (``opatlas
    sweep list | head -1``). Click catches EPIPE inside its ``main`` and exits 1, so what
    ``typer.echo`` writes must be caught before it gets there; rich's tables already are
    (``console.make_console``)."""
    import errno

    def invoke_quietly(ctx: Any) -> Any:
        try:
            return invoke(ctx)
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            from opatlas.console import stdout_gone

            stdout_gone()
            raise SystemExit(0) from None

    return invoke_quietly


def main(argv: list[str] | None = None) -> None:
    """Entry point: opatlas errors, usage errors and outputs that cannot be written become one
    line on stderr and exit code 2; warnings (fallbacks, unknown devices) one line each."""
    import errno
    import warnings

    cx, abort = _click_exceptions(), _abort()
    warnings.showwarning = _show_warning
    try:
        code = _command().main(args=argv, prog_name="opatlas", standalone_mode=False)
    except cx.NoArgsIsHelpError as exc:
        typer.echo(exc.format_message(), err=True)
        sys.exit(2)
    except cx.UsageError as exc:
        path = exc.ctx.command_path if exc.ctx else "opatlas"
        typer.echo(f"opatlas: error: {path}: {exc.format_message()} (see '{path} --help')",
                   err=True)
        sys.exit(2)
    except OpatlasError as exc:
        typer.echo(f"opatlas: error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:  # an output path the user named cannot be made: not a bug
        if exc.errno == errno.EPIPE:  # the reader went away (| head): end as if done
            from opatlas.console import stdout_gone

            stdout_gone()
            sys.exit(0)
        if exc.filename is None:
            raise
        typer.echo(f"opatlas: error: {exc.filename}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    except (KeyboardInterrupt, abort):
        typer.echo("opatlas: interrupted; results recorded so far are kept", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
