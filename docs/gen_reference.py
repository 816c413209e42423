"""Writes docs/reference.md, the command reference, from the CLI's own parsers: every
command's ``--help``, as a terminal 88 columns wide shows it. ``--check`` writes
nothing and exits 1 when the file is stale (tests/test_docs.py runs it).

    python docs/gen_reference.py          # rewrite docs/reference.md
    python docs/gen_reference.py --check  # is it up to date?
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().with_name("reference.md")
WIDTH = "88"


def render() -> str:
    os.environ["COLUMNS"] = WIDTH  # argparse wraps help to $COLUMNS
    from autotune.cli._flags import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = ["# Command reference", "",
             "Generated from the parsers by `python docs/gen_reference.py`; do not edit. "
             "Each command's examples and real output are in [Commands](commands.md).", "",
             "```", parser.format_help().rstrip(), "```"]
    for name, sub in commands.choices.items():
        parts += ["", f"## autotune {name}", "", "```", sub.format_help().rstrip(), "```"]
    return "\n".join(parts) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE} is stale: run python docs/gen_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
