"""The `ssetape` command line: one group, its commands registered by name below.

Each command lives in the module of its group (browse, audit, proxy, cassettes, simulate,
demo) and is imported only when it runs: mitmproxy takes most of a second to import, and the
commands that only read the store must not pay for it. A new command is one function in its
group's module and one line in :data:`COMMANDS`.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["COMMANDS", "main"]

# name -> "module:function"
COMMANDS = {
    "list": "ssetape.cli.browse:list_cmd",
    "ls": "ssetape.cli.browse:list_cmd",
    "show": "ssetape.cli.browse:show",
    "stats": "ssetape.cli.audit:stats",
    "reindex": "ssetape.cli.audit:reindex",
    "prune": "ssetape.cli.audit:prune",
    "record": "ssetape.cli.proxy:record",
    "run": "ssetape.cli.run:run",
    "replay": "ssetape.cli.proxy:replay",
    "ca": "ssetape.cli.proxy:ca",
    "export": "ssetape.cli.cassettes:export_cmd",
    "import": "ssetape.cli.cassettes:import_cmd",
    "simulate": "ssetape.cli.simulate:simulate",
    "demo": "ssetape.cli.demo:demo",
    "web": "ssetape.cli.web:web",
    "mcp": "ssetape.cli.mcp:mcp_cmd",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when they are looked up (click's documented way
    of loading subcommands lazily)."""

    def __init__(self, *args: Any, commands_by_name: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = commands_by_name

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._lazy)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._lazy.get(cmd_name)
        if target is None:
            return None
        module, _, name = target.partition(":")
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command)
        return command


@click.group(
    cls=LazyGroup,
    commands_by_name=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="ssetape")
def main() -> None:
    """Record and replay streaming LLM API traffic with the timing of every event."""
