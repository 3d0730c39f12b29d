"""The README stays a page, and what README.md and docs/ tell a user is true of the repository.

Every relative link (images included) must reach a file, and its #anchor a heading of that file; every
`wpultr …` command in a code block must parse against the real CLI (typer's click command tree: unknown
commands, options and missing arguments fail); every `wpultr run` line of the README must give a config that
loads with its `--set` overrides; the README's two commands must be the Makefile's and CI's.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from wpultr.cli import app
from wpultr.cli_support import parse_sets
from wpultr.config import load_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
MAX_README_LINES = 150

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_COMMAND_START = re.compile(r"^(?:\.venv/bin/)?wpultr\s")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where a `[x](y)` is not a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def relative_links(path: Path) -> list[str]:
    """Every link target in `path` that is not a URL (http(s), mailto)."""
    targets = _LINK.findall(_prose(path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: Path) -> list[str]:
    """The links of `path` whose file does not exist, or whose #anchor is no heading of that file."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {_rel(dest)})")
    return broken


def command_lines(path: Path) -> list[str]:
    """The `wpultr …` command lines of the fenced code blocks of `path`, backslash continuations joined."""
    lines = []
    for block in _FENCE.findall(path.read_text(encoding="utf-8")):
        body = block.split("\n")[1:-1]
        joined = "\n".join(body).replace("\\\n", " ")
        lines += [line.strip() for line in joined.split("\n") if _COMMAND_START.match(line.strip())]
    return lines


def words_of(line: str) -> list[str]:
    """A command line's words after `wpultr`, as the shell splits them (a trailing # comment dropped)."""
    return shlex.split(line, comments=True)[1:]


def resolve(words: list[str]) -> tuple[object, list[str], list[str]]:
    """The command `wpultr WORDS…` names (typer's click command), its path and the words left (its arguments);
    LookupError naming the word that is no command."""
    cmd, path, rest = typer.main.get_command(app), ["wpultr"], list(words)
    while isinstance(cmd, TyperGroup) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(typer.Context(cmd), rest[0])
        if sub is None:
            raise LookupError(f"{' '.join(path)}: no command {rest[0]!r}")
        cmd, path = sub, path + [rest.pop(0)]
    return cmd, path, rest


def parse_command(line: str) -> typer.Context:
    """Parse a documented command line against the CLI as the shell would split it, running nothing: an unknown
    command (LookupError), option, option value or a missing argument (typer.TyperException) fails."""
    cmd, path, rest = resolve(words_of(line))
    if isinstance(cmd, TyperGroup):
        raise LookupError(f"{' '.join(path)} names a group of commands, not one")
    return cmd.make_context(" ".join(path), rest)


def test_readme_is_a_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; a page is {MAX_README_LINES}"


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_relative_links_resolve(doc):
    assert broken_links(doc) == []


def test_readme_shows_a_report_picture():
    """The README's first screen shows what a result looks like: a PNG of a report, kept under docs/img/."""
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)", _prose(README.read_text(encoding="utf-8")))
    assert images, "README.md shows no picture of a report"
    for image in images:
        assert image.startswith("docs/img/"), f"{image}: README pictures live under docs/img/"
        assert (ROOT / image).is_file(), f"{image}: no such file"
        assert (ROOT / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{image}: not a PNG image"


def test_every_doc_is_reachable_from_the_readme():
    """No page of docs/ is an orphan: each is linked from the README or from a page the README links."""
    seen, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.is_file():   # a missing page: the link test says so
            continue
        seen.add(page)
        todo += [(page.parent / t.partition("#")[0]).resolve() for t in relative_links(page) if t.partition("#")[0]]
    assert [_rel(d) for d in DOCS if d.resolve() not in seen] == []


def test_readme_names_only_real_subcommands():
    """Every `wpultr WORD …` in the README's code (spans and blocks) starts with a real (sub)command."""
    text = README.read_text(encoding="utf-8")
    code = "\n".join(_FENCE.findall(text) + _CODE_SPAN.findall(_FENCE.sub("", text)))
    named = re.findall(r"(?:^|[\s`(/])wpultr((?:[ \t]+[a-z][a-z-]*)+)", code, re.M)
    assert named, "README.md names no wpultr command"
    unknown = []
    for words in named:   # a leaf command's next word is its argument: only a group's is a subcommand
        try:
            resolve(words.split()[:2])
        except LookupError as e:
            unknown.append(str(e))
    assert unknown == []


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_documented_commands_parse(doc):
    failures = []
    for line in command_lines(doc):
        try:
            parse_command(line)
        except LookupError as e:
            failures.append(f"{line}\n    -> {e}")
        except typer.TyperException as e:
            failures.append(f"{line}\n    -> {e.format_message()}")
    assert failures == []


def test_readme_covers_a_users_commands():
    """The README shows every command a user runs on their own logs, from ingest to score."""
    shown = {" ".join(resolve(words_of(line))[1][1:]) for line in command_lines(README)}
    wanted = {"ingest", "run", "status", "graph show", "evaluate", "compare", "export", "score"}
    assert wanted <= shown, f"missing: {sorted(wanted - shown)}"


def test_readme_run_configs_load(monkeypatch):
    """Each `wpultr run` line of the README: its config with its --set overrides is a valid run config."""
    monkeypatch.chdir(ROOT)   # the README's commands run from the repository root
    runs = [line for line in command_lines(README) if resolve(words_of(line))[1] == ["wpultr", "run"]]
    assert runs
    for line in runs:
        ctx = parse_command(line)
        load_config(ROOT / ctx.params["config"], parse_sets(ctx.params["set_"]))


def test_readme_commands_are_the_makefiles_and_ci_runs_make_test():
    blocks = "\n".join(_FENCE.findall(README.read_text(encoding="utf-8")))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert re.search(rf"^make {target}\b", blocks, re.M), f"README.md does not show `make {target}`"
        assert re.search(rf"^{target}:", makefile, re.M), f"Makefile has no {target} target"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci
