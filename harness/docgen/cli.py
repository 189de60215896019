"""The CLI reference: every verb of ``python -m harness`` and every flag, from the argparse parser
itself (:func:`harness.cli.parser`), so the page cannot drift from what the command accepts."""

from __future__ import annotations

import argparse

from harness.cli import COMMANDS, parser
from harness.docgen.md import code, page, table


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return {}
    for action in sub._choices_actions:  # an action's one-line help is its description where it has none
        chosen = sub.choices[action.dest]
        chosen.description = chosen.description or action.help
    return dict(sub.choices)


def verbs() -> dict[str, argparse.ArgumentParser]:
    """Verb -> its parser, in the order of :data:`harness.cli.COMMANDS`; a verb with actions of its own
    (``baseline update``) is listed as each action."""
    top = _subcommands(parser())
    out = {}
    for name in COMMANDS:
        actions = _subcommands(top[name])
        out.update({f"{name} {a}": p for a, p in actions.items()} if actions else {name: top[name]})
    return out


def arguments(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """The verb's own arguments (help and the global --debug left out)."""
    skip = (argparse._HelpAction, argparse._SubParsersAction)
    return [a for a in p._actions if not isinstance(a, skip) and a.dest != "debug"]


def _usage(a: argparse.Action) -> str:
    if not a.option_strings:
        return a.metavar if isinstance(a.metavar, str) else a.dest.upper() + (" ..." if a.nargs in ("*", "+") else "")
    flag = ", ".join(a.option_strings)
    if a.nargs == 0:
        return flag
    metavar = a.metavar if isinstance(a.metavar, str) else a.dest.upper()
    return f"{flag} {metavar}"


def _default(a: argparse.Action) -> str:
    if a.nargs == 0 or a.default in (None, argparse.SUPPRESS) or a.default == []:
        return ""
    return code(a.default)


def _help(a: argparse.Action) -> str:
    text = (a.help or "") % {"default": a.default, "prog": "", "dest": a.dest} if a.help else ""
    if a.choices is not None:
        text += " (one of " + ", ".join(code(c) for c in a.choices) + ")"
    return text


def render() -> str:
    sections = []
    for name, p in verbs().items():
        doc = (p.description or "").strip().split("\n\n")[0].replace("\n", " ")
        rows = [
            [code(_usage(a)), "yes" if a.required or not a.option_strings else "", _default(a), _help(a)]
            for a in arguments(p)
        ]
        sections.append(
            f"## `{name}`\n\n{doc}\n\n```\n{p.format_usage().strip()}\n```\n\n"
            + table(["argument", "required", "default", "what it does"], rows)
        )
    intro = (
        "`python -m harness [--debug] COMMAND ...`. Every verb ends with one exit status and, on failure, one line "
        "on stderr ([faults and exit statuses](../faults.md)); `--debug`, before or after the verb, adds the "
        "traceback. `python -m harness COMMAND --help` prints the same as each section below."
    )
    return page("Command line", "harness/cli.py: parser()", intro, *sections)
