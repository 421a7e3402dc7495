"""The command registry: every name resolves to its command, and help lists them all."""

from __future__ import annotations

import click
from click.testing import CliRunner

from ssetape.cli.main import COMMANDS, main


def test_every_registered_command_resolves_to_a_command_of_that_name() -> None:
    ctx = click.Context(main)
    for name, target in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command), target
        assert command.name == ("list" if name == "ls" else name)
    assert main.get_command(ctx, "nope") is None


def test_help_lists_every_command_and_a_typo_is_an_error() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output
    typo = runner.invoke(main, ["lsit"])
    assert typo.exit_code == 2 and "No such command 'lsit'" in typo.output
