"""``python -m ssetape.cli``: the `ssetape` command, where no script is on the PATH."""

from ssetape.cli.main import main

main(prog_name="ssetape")
