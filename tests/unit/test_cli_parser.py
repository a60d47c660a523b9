"""The command's parser is built for the one command an invocation names: every leaf
command parses its arguments as the whole parser does, and a name that is no command, or
help asked before one, gets the whole parser and its messages."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from oarlock.cli import _parser_for, build_parser
from oarlock.cli._args import OneCommand


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], argparse.ArgumentParser]
]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaves(child, (*path, name))


def _argv(path: tuple[str, ...], leaf: argparse.ArgumentParser) -> list[str]:
    """The leaf command with its required arguments, and every option that takes none."""
    argv = ["--db", "x.db", *path]
    for action in leaf._actions:
        if not action.option_strings:
            argv += ["a"] * (1 if action.nargs in (None, "?", "*") else 2)
        elif action.required:
            argv += [action.option_strings[0], str(next(iter(action.choices or ["1"])))]
    return argv


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, OneCommand))
    return dict(action.choices)


LEAVES = list(_leaves(build_parser()))


@pytest.mark.parametrize("path", [p for p, _ in LEAVES], ids=" ".join)
def test_each_command_parses_as_the_whole_parser_does(path: tuple[str, ...]) -> None:
    leaf = dict(LEAVES)[path]
    argv = _argv(path, leaf)
    whole = build_parser().parse_args(argv)
    only = _parser_for(argv)
    assert list(_commands(only)) == [path[0]]
    assert vars(only.parse_args(argv)) == vars(whole)


def test_there_are_many_commands_and_one_is_built() -> None:
    assert len(_commands(build_parser())) > 20
    assert list(_commands(_parser_for(["--log-format", "json", "runs", "list"]))) == ["runs"]
    assert list(_commands(_parser_for(["--db=x.db", "demo"]))) == ["demo"]


@pytest.mark.parametrize(
    "argv",
    [["nothing"], ["--help"], ["-h", "runs"], ["--version"], [], ["--db"], ["--", "runs"]],
)
def test_no_command_help_or_a_wrong_name_gets_the_whole_parser(argv: list[str]) -> None:
    assert list(_commands(_parser_for(argv))) == list(_commands(build_parser()))


def test_a_wrong_name_is_refused_with_every_command_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser_for(["nothing"]).parse_args(["nothing"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nothing'" in err
    assert all(f"'{name}'" in err for name in _commands(build_parser()))
