"""The argument parser of every `cockpit` command line: a mistake argparse catches (a bad number,
an unknown option, a missing argument) is one line naming the option, what was wrong and where
the help is, exit status 2; argparse's own error printed the whole usage first. `--help` still
prints the full usage."""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

KINDS = {int: "a whole number", float: "a number"}
# A value that fits, for an option whose message would otherwise show only its metavar.
EXAMPLES = {
    "--steps": "300",
    "--target": "1.5",
    "--repeat-baseline": "3",
    "--tokens": "200",
    "--temperature": "0.8",
    "--top-k": "50",
    "--seed": "1234",
    "--threads": "4",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors said in one line (subparsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {self.explain(message)} ({self.prog} --help)\n")

    # The parser entered last while parsing: the innermost subcommand's (parse_known_args runs
    # for the top parser, then for each subparser the command line names, in turn).
    _entered: OneLineParser | None = None
    _depth = 0

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        outermost = OneLineParser._depth == 0
        OneLineParser._entered = self
        OneLineParser._depth += 1
        try:
            parsed, extras = super().parse_known_args(args, namespace)
        finally:
            OneLineParser._depth -= 1
        inner = OneLineParser._entered
        if extras and outermost and inner is not None and inner is not self:
            # argparse would have the top parser say "cockpit: error: unrecognized arguments";
            # the subcommand that was given them is the one to name, with its help.
            inner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def explain(self, message: str) -> str:
        if m := re.fullmatch(r"argument (\S+): invalid (\w+) value: '(.*)'", message, re.S):
            action = self.action_named(m[1])
            kind = KINDS.get(getattr(action, "type", None), f"a valid {m[2]}")
            return f"{m[1]}: '{m[3]}' is not {kind}; {self.example(m[1], action)}"
        if m := re.fullmatch(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)", message, re.S):
            choices = m[3].replace("'", "")
            if m[1].startswith("-"):
                return f"{m[1]}: '{m[2]}' is not one of {choices}; e.g. {m[1].split('/')[0]} {choices.split(', ')[0]}"
            return f"{m[1]}: '{m[2]}' is not one of {choices}"
        if m := re.fullmatch(r"argument (\S+): expected one argument", message):
            return f"{m[1]} needs a value; {self.example(m[1], self.action_named(m[1]))}"
        if m := re.fullmatch(r"the following arguments are required: (.*)", message):
            names = m[1].split(", ")
            return f"missing {' and '.join(names)}: give {self.prog} {' '.join(map(self.spelled, names))}"
        if m := re.fullmatch(r"unrecognized arguments: (.*)", message):
            words = m[1].split()
            options = [w for w in words if w.startswith("-")]
            if options:
                return f"{options[0]} is not an option of {self.prog}"
            return f"unexpected argument{'s' if len(words) > 1 else ''} {m[1]}"
        if m := re.fullmatch(r"ambiguous option: (\S+) could match (.*)", message):
            return f"{m[1]} could be {m[2].replace(', ', ' or ')}; give the whole option"
        return message.removeprefix("argument ")

    def action_named(self, name: str) -> argparse.Action | None:
        for action in self._actions:
            if name in action.option_strings or name in (action.metavar, action.dest):
                return action
            if "/".join(action.option_strings) == name:
                return action
        return None

    def spelled(self, name: str) -> str:
        """A required argument as it is written: `--format hf|nanogpt`, `RUN_DIR`."""
        action = self.action_named(name)
        if not name.startswith("-") or action is None or action.nargs == 0:
            return name
        if action.metavar:
            return f"{name} {action.metavar}"
        if action.choices:
            return f"{name} {'|'.join(map(str, action.choices))}"
        return f"{name} {action.dest.upper()}"

    def example(self, name: str, action: argparse.Action | None) -> str:
        option = name.split("/")[0]
        value = EXAMPLES.get(option)
        if value is None and action is not None and action.default not in (None, "", []):
            value = str(action.default)
        if value is None:
            metavar = getattr(action, "metavar", None) or "VALUE"
            return f"give {option} {metavar}"
        return f"e.g. {option} {value}"

