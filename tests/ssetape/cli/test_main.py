"""The command registry: every name resolves to its command, and help lists them all."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from ssetape.cli.main import COMMANDS, main


def test_every_registered_command_resolves_to_a_command_of_that_name() -> None:
    ctx = click.Context(main)
    for name, (target, _) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command), target
        assert command.name == ("list" if name == "ls" else name)
    assert main.get_command(ctx, "nope") is None


def test_the_table_s_help_is_each_command_s_own() -> None:
    """`ssetape --help` prints the table's sentence without importing the command: it must
    be the sentence click would take from the command's help."""
    ctx = click.Context(main)
    for name, (_, short_help) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(limit=10_000) == short_help, name


@pytest.mark.parametrize("width", [40, 80, 100, 200])
def test_help_lists_the_commands_as_click_would(width: int) -> None:
    """The listing from the table is the one click makes from the imported commands, cut
    to the same width."""
    ctx = click.Context(main, terminal_width=width)
    ours, clicks = ctx.make_formatter(), ctx.make_formatter()
    main.format_commands(ctx, ours)
    click.Group.format_commands(main, ctx, clicks)
    assert ours.getvalue() == clicks.getvalue()


def test_help_lists_every_command_and_a_typo_is_an_error() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output
    typo = runner.invoke(main, ["lsit"])
    assert typo.exit_code == 2 and "No such command 'lsit'" in typo.output
