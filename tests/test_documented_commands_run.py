"""Every command in README.md and docs/*.md runs as written.

From each fenced `bash` block, the lines starting with `autotune ` (a trailing `\\` continues a line):
- unmarked ones run, in order within their page, through `python -m autotune` in a temporary directory with
  AUTOTUNE_DB on a fresh file there, and must exit 0 (they need no GPU and take seconds on the interpreter);
- ones whose comment starts with `gpu` (GPU-only) or `long` (minutes on a CPU) do not run, but their command and
  options must exist: with `--help` appended they exit 0.
Each fenced `python` block runs as a script the same way, unless its first line is a `# gpu` comment; one whose
first line is `# file: NAME.py` is saved as NAME.py in that directory first, where the page's later commands import
it (`autotune verify NAME:attr`).
README's two commands are the ones .ci/run runs. (The convention is documented in docs/testing.md.)
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
from click.testing import CliRunner

from autotune.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKED = re.compile(r"#\s*(gpu|long)\b")


@dataclasses.dataclass(frozen=True)
class Snippet:
    page: str
    kind: str  # "command" or "python"
    text: str  # the command without its comment, or the script
    marked: bool  # GPU-only or long: not run here

    def __str__(self) -> str:
        return f"{self.page}: {self.text.splitlines()[0]}"


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of each fenced block, in page order."""
    blocks, language, lines = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if language is None:
                language, lines = line[3:].strip(), []
            else:
                blocks.append((language, lines))
                language = None
        elif language is not None:
            lines.append(line)
    assert language is None, "a fenced block is not closed"
    return blocks


def split_comment(line: str) -> tuple[str, str]:
    """The command and its trailing comment: the first `#` outside quotes that starts a word."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def snippets(page: pathlib.Path) -> list[Snippet]:
    name = page.relative_to(ROOT).as_posix()
    found = []
    for language, lines in fenced_blocks(page.read_text()):
        if language == "python":
            found.append(Snippet(name, "python", "\n".join(lines), bool(lines) and lines[0].startswith("# gpu")))
        elif language == "bash":
            joined, pending = [], ""
            for line in lines:
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                joined.append(pending + line)
                pending = ""
            for line in joined:
                command, comment = split_comment(line.strip())
                if command.startswith("autotune "):
                    found.append(Snippet(name, "command", command, bool(MARKED.match(comment))))
    return found


ALL = [s for page in PAGES for s in snippets(page)]
RUNNABLE_PAGES = sorted({s.page for s in ALL if not s.marked})


@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_the_cpu_commands_and_examples_of_a_page_run_as_written(page, tmp_path):
    env = {
        **os.environ,
        "AUTOTUNE_DB": str(tmp_path / "autotune.sqlite"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    for snippet in (s for s in ALL if s.page == page and not s.marked):
        if snippet.kind == "command":
            argv = [sys.executable, "-m", "autotune", *shlex.split(snippet.text)[1:]]
        else:  # from a file, as users run it: Triton reads a @triton.jit function's source back from its file
            named = re.match(r"#\s*file:\s*(\w+\.py)\s*$", snippet.text.splitlines()[0]) if snippet.text else None
            script = tmp_path / (named.group(1) if named else "snippet.py")
            script.write_text(snippet.text)
            argv = [sys.executable, str(script)]
        run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{snippet} exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"


@pytest.mark.parametrize("snippet", [s for s in ALL if s.marked and s.kind == "command"], ids=str)
def test_a_gpu_or_long_command_names_a_command_and_options_that_exist(snippet):
    result = CliRunner().invoke(main, [*shlex.split(snippet.text)[1:], "--help"])
    assert result.exit_code == 0, f"{snippet}:\n{result.output}"


def test_the_readme_shows_commands_and_an_example_that_run_here():
    readme = [s for s in ALL if s.page == "README.md" and not s.marked]
    assert {s.kind for s in readme} == {"command", "python"}
    assert len([s for s in readme if s.kind == "command"]) >= 5


def test_the_readme_two_commands_are_the_ones_ci_runs():
    text = (ROOT / "README.md").read_text()
    section = text.split("## The two commands", 1)[1]
    language, lines = fenced_blocks(section)[0]
    commands = [split_comment(line.strip())[0] for line in lines if line.strip()]
    ci = {line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()}
    assert language == "bash" and len(commands) == 2
    assert set(commands) <= ci
