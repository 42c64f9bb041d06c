"""How the command line meets a shell or a log: conventional metavars in ``--help`` (``FILE``,
``INTEGER``, ``METRIC``, ``KEY=VALUE`` instead of Python types such as ``<list[str]>``) and usage
errors as one plain line when stderr is not a terminal (a log collector gets one record, not a
boxed panel)."""

from __future__ import annotations

import sys
from typing import Any, get_args

import typer
from typer.main import get_command

#: options typer adds for shell completion: an optional shell name (detected when left out)
_COMPLETION = {"install_completion", "show_completion"}


def _metavar(param: Any) -> str:
    """The conventional metavar of one typer parameter (an option's value or an argument)."""
    if param.param_type_name == "argument":
        return param.name.upper() + ("..." if param.nargs == -1 else "")
    if getattr(param, "is_flag", False):
        return ""
    desc = param.type_descriptor
    base = get_args(desc.annotation)[0] if desc.is_list and get_args(desc.annotation) else desc.annotation
    if desc.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices) + "]"
    if desc.is_path or desc.is_file:
        info = desc.parameter_info
        file_okay, dir_okay = getattr(info, "file_okay", True), getattr(info, "dir_okay", True)
        return "FILE" if file_okay and not dir_okay else "DIR" if dir_okay and not file_okay else "PATH"
    if base is bool:
        return ""
    if base is int:
        return "INTEGER"
    if base is float:
        return "NUMBER"
    longest = max((o for o in param.opts if o.startswith("--")), key=len, default=param.name)
    return str(longest).lstrip("-").replace("-", "_").upper()


def plain_metavars(command: Any) -> Any:
    """Give every parameter of ``command`` and its subcommands without a metavar of its own a
    conventional one (:func:`_metavar`); returns ``command``."""
    for param in command.params:
        if param.metavar is None:
            param.metavar = "[SHELL]" if param.name in _COMPLETION else _metavar(param)
        if param.param_type_name == "argument":  # typer adds "<str>" and writes a required one "{NAME}"
            name = param.metavar
            param.display_type_rich = lambda ctx: None
            param._usage_display_name = lambda name=name, required=param.required: name if required else f"[{name}]"
    help_option = command.get_help_option

    def plain_help_option(ctx: Any) -> Any:  # --help is made per context: no "<bool>" after it
        option = help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = plain_help_option
    for sub in getattr(command, "commands", {}).values():
        plain_metavars(sub)
    return command


def cli_command(app: typer.Typer) -> Any:
    """The click command of ``app`` with :func:`plain_metavars` applied."""
    return plain_metavars(get_command(app))


def run_cli(command: Any, args: list[str] | None = None) -> int:
    """Run ``command`` as ``perfsift``; return its exit code. On a terminal, usage errors are
    typer's panels; otherwise one line ``perfsift CMD: error: ... (see perfsift CMD --help)`` on
    stderr with exit code 2 (the help itself still prints for a bare ``perfsift``)."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    if sys.stderr.isatty():
        try:
            command.main(args=args, prog_name="perfsift")
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0
    try:
        rc = command.main(args=args, prog_name="perfsift", standalone_mode=False)
    except NoArgsIsHelpError as exc:
        if exc.ctx is not None:
            print(exc.ctx.get_help())
        return exc.exit_code
    except ClickException as exc:
        path = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "perfsift"  # type: ignore[attr-defined]
        print(f"{path}: error: {exc.format_message()} (see {path} --help)", file=sys.stderr)
        return exc.exit_code
    except typer.Abort:
        print("perfsift: aborted", file=sys.stderr)
        return 1
    return rc if type(rc) is int else 0
