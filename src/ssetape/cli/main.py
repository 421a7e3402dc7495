"""The `ssetape` command line: one group, its commands registered by name below.

Each command lives in the module of its group (browse, audit, proxy, cassettes, simulate,
demo) and is imported only when it runs: mitmproxy takes most of a second to import, and the
commands that only read the store must not pay for it. ``ssetape --help`` imports none of
them: it prints each command's first help sentence from :data:`COMMANDS` (tests/ssetape/cli/
test_main.py checks that sentence against the command's own). A new command is one function
in its group's module and one line in :data:`COMMANDS`.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["COMMANDS", "main"]

# name -> ("module:function", the first sentence of its help, as `ssetape --help` shows it)
COMMANDS: dict[str, tuple[str, str]] = {
    "list": (
        "ssetape.cli.browse:list_cmd",
        "List recorded exchanges, newest first unless --sort says otherwise (alias: ls).",
    ),
    "ls": (
        "ssetape.cli.browse:list_cmd",
        "List recorded exchanges, newest first unless --sort says otherwise (alias: ls).",
    ),
    "show": (
        "ssetape.cli.browse:show",
        "Show one exchange: redacted headers, bodies, its events with their offsets.",
    ),
    "stats": (
        "ssetape.cli.audit:stats",
        "Count, failed count and rate, TTFB/TTFT p50/p95, tokens and tokens/s, per group.",
    ),
    "reindex": (
        "ssetape.cli.audit:reindex",
        "Recompute the stream knowledge (api, model, outcome, usage, timing, findings) and "
        "each exchange's price at the rates of its day.",
    ),
    "db": (
        "ssetape.cli.db:db",
        "The store's schema: `db status` says which revision it is at and which this ssetape "
        "wants, changing nothing.",
    ),
    "prune": (
        "ssetape.cli.audit:prune",
        "Delete what started before a cut, in short batches, safe while recorders write.",
    ),
    "record": ("ssetape.cli.proxy:record", "Run a recording proxy until Ctrl-C / SIGTERM."),
    "run": (
        "ssetape.cli.run:run",
        "Record what one command sends: run it through a recording proxy, with the proxy and "
        "ssetape's CA in its environment, and exit with its exit code.",
    ),
    "replay": (
        "ssetape.cli.replay:replay",
        "Serve recorded streams back with their original timing, until Ctrl-C / SIGTERM.",
    ),
    "ca": (
        "ssetape.cli.proxy:ca",
        "Print where the proxy's CA certificate is and how to trust it (created if missing).",
    ),
    "export": (
        "ssetape.cli.cassettes:export_cmd",
        "Write recorded exchanges to a cassette (JSON Lines) or a HAR file.",
    ),
    "import": (
        "ssetape.cli.cassettes:import_cmd",
        "Add a cassette's exchanges to a store (one transaction; exchanges already there are "
        "skipped), ready for `ssetape replay`.",
    ),
    "simulate": (
        "ssetape.cli.simulate:simulate",
        "Serve a simulated OpenAI/Anthropic-style streaming API (no key, no network).",
    ),
    "demo": (
        "ssetape.cli.demo:demo",
        "Record a few streams from the built-in simulator, show them, and replay them.",
    ),
    "web": (
        "ssetape.cli.web:web",
        "Browse the store in a web page: exchanges, timelines, events, live (read-only).",
    ),
    "mcp": (
        "ssetape.cli.mcp:mcp_cmd",
        "Serve the store to coding agents over MCP on stdio (read-only tools).",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when they are looked up (click's documented way
    of loading subcommands lazily), and whose help lists them without importing any."""

    def __init__(
        self, *args: Any, commands_by_name: dict[str, tuple[str, str]], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = commands_by_name

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._lazy)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._lazy.get(cmd_name)
        if target is None:
            return None
        module, _, name = target[0].partition(":")
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing, from the table: importing every command to read its help
        would import mitmproxy, Starlette and MCP (more than a second) to print a screen."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        # A stand-in command shortens the sentence exactly as click shortens the real one's.
        rows = [
            (name, click.Command(name, help=self._lazy[name][1]).get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    commands_by_name=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="ssetape")
def main() -> None:
    """Record and replay streaming LLM API traffic with the timing of every event."""
