"""A mistyped command line (an unknown option, a bad or missing value) refused in one line, as
a bad environments file is: `error: <what> (see yardstick <command> -h)`, exit 2."""

from __future__ import annotations

import sys

import typer
from typer._click.exceptions import UsageError  # typer's own copy of click (typer >= 0.20)
from typer.core import TyperGroup


class OneLineUsage(TyperGroup):
    """The command group whose usage errors, its own and its commands', are one line."""

    def make_context(self, info_name, args, parent=None, **extra):
        """Parse the group's own options."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UsageError as exc:
            _refuse(exc)

    def invoke(self, ctx):
        """Parse and run the command (its usage errors are raised here)."""
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            _refuse(exc)


def _refuse(exc: UsageError) -> None:
    """Print the usage error as one line and exit 2 (help asked by no arguments: as it was)."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # not an error: the help is shown
        raise exc
    what = " ".join(exc.format_message().split())
    where = f" (see {exc.ctx.command_path} -h)" if exc.ctx is not None else ""
    sys.stderr.write(f"error: {what}{where}\n")
    sys.stderr.flush()
    raise typer.Exit(exc.exit_code)
