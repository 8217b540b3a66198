"""Reads the shell sessions and Python examples shown in README.md and docs/*.md, runs
them, and compares what they print with what the page shows.

A session is a fenced block whose lines start with `$ ` (a command) followed by the
output the page shows for it. A `pycon` block is a Python session (`>>> `, `... `).
A block may be preceded by HTML comments that the rendered page does not show:

    <!-- docs-test: before: CMD -->        run CMD (in the page's sandbox) first
    <!-- docs-test: output of: CMD -->     the block is CMD's output (no `$` lines)
    <!-- docs-test: not run: PREFIX: WHY --> the command starting with PREFIX is not run
    <!-- docs-test: varies: PREFIX -->     a line starting with PREFIX matches any such line

How an output is compared (`match_output`): every line shown must be printed, in
order, one for one; a line `...` stands for any number of lines, a line ending in
` ...` for any line starting with what comes before. Within a line, the words must be
the same (spaces collapsed) and so must every number, except a number followed by a
unit of time (`s`, `ms`, `µs`, `min`, `GFLOP/s`): wall-clock figures differ from run
to run; and two numbers below 1e-3 written with an exponent (`6.29e-07`) match: they are
rounding errors, which differ with the CPU's BLAS kernels (`varies:` covers a line that
names where the largest one is). The exit status must be 2 when the page shows `error:`, 1 when it shows the
verdict `not equivalent`, else 0 (a following `$ echo $?` shows it too).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess

DIRECTIVE = re.compile(
    r"<!--\s*docs-test:\s*(before|output of|not run|varies):\s*(.*?)\s*-->", re.S)
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)


@dataclasses.dataclass
class Command:
    line: int          # the command's line in the page
    text: str          # the shell command
    output: list[str]  # the lines the page shows after it


@dataclasses.dataclass
class Block:
    page: str
    line: int                        # line of the opening fence
    info: str                        # the fence's info string
    body: list[str]
    before: list[str] = dataclasses.field(default_factory=list)
    output_of: str | None = None
    not_run: dict[str, str] = dataclasses.field(default_factory=dict)
    varies: list[str] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    def commands(self) -> list[Command]:
        if self.output_of is not None:
            return [Command(self.line, self.output_of, list(self.body))]
        commands: list[Command] = []
        for offset, text in enumerate(self.body):
            if text.startswith("$ "):
                commands.append(Command(self.line + 1 + offset, text[2:], []))
            elif commands:
                commands[-1].output.append(text)
        return commands


def blocks_of(root: pathlib.Path, page: str) -> list[Block]:
    """The runnable blocks of one page: shell sessions, pycon sessions, and blocks a
    directive names the command of."""
    text = (root / page).read_text()
    found = []
    for fence in FENCE.finditer(text):
        line = text.count("\n", 0, fence.start()) + 1
        block = Block(page, line, fence.group(1).strip(), fence.group(2).split("\n")[:-1])
        # Directives in the comments right above the fence (blank lines between allowed).
        above = text[:fence.start()].rstrip()
        while above.endswith("-->"):
            start = above.rfind("<!--")
            directive = DIRECTIVE.fullmatch(above[start:])
            if start < 0 or directive is None:
                break
            kind, value = directive.group(1), " ".join(directive.group(2).split())
            if kind == "before":
                block.before.insert(0, value)
            elif kind == "output of":
                block.output_of = value
            elif kind == "varies":
                block.varies.append(value)
            else:
                prefix, _, why = value.partition(": ")
                block.not_run[prefix] = why
            above = above[:start].rstrip()
        is_shell = block.info in ("", "console", "shell") and any(
            b.startswith("$ ") for b in block.body)
        if is_shell or block.info == "pycon" or block.output_of is not None:
            found.append(block)
    return found


def pages(root: pathlib.Path) -> list[str]:
    return ["README.md"] + sorted(
        str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))


# --- comparing an output with the page ---------------------------------------------

NUMBER = re.compile(r"[-+]?(?:\d[\d,]*)?\.?\d+(?:[eE][-+]?\d+)?")
TIME_UNIT = re.compile(r"\s*(?:s|ms|µs|us|min|GFLOP/s)\b")


def _tokens(line: str) -> list[tuple[str, str]]:
    """('text', words) and ('number', digits) or ('time', digits) tokens of a line."""
    line = " ".join(line.split())
    tokens, at = [], 0
    for m in NUMBER.finditer(line):
        # A number glued to a word (ids like 'mb0', 'wq', 'x86_64') is part of the word.
        if m.start() > 0 and (line[m.start() - 1].isalpha() or line[m.start() - 1] == "_"):
            continue
        if m.end() < len(line) and (line[m.end()].isalpha() and not
                                     TIME_UNIT.match(line, m.end())):
            if not re.match(r"(?:[KMGT]i?B|GFLOP|B)\b", line[m.end():]):
                continue
        tokens.append(("text", line[at:m.start()]))
        kind = "time" if TIME_UNIT.match(line, m.end()) else "number"
        tokens.append((kind, m.group(0)))
        at = m.end()
    tokens.append(("text", line[at:]))
    return tokens


def _rounding_error(number: str) -> bool:
    return "e-" in number.lower() and abs(float(number.replace(",", ""))) < 1e-3


def lines_match(shown: str, printed: str, varies: tuple[str, ...] = ()) -> bool:
    for prefix in varies:
        if shown.strip().startswith(prefix):
            return printed.strip().startswith(prefix)
    if shown.rstrip().endswith(" ...") and shown.strip() != "...":
        prefix = " ".join(shown.rstrip()[:-4].split())
        return " ".join(printed.split()).startswith(prefix)
    a, b = _tokens(shown), _tokens(printed)
    if len(a) != len(b):
        return False
    for (kind_a, value_a), (kind_b, value_b) in zip(a, b):
        if kind_a == "time" and kind_b == "time":
            continue
        if kind_a == kind_b == "number" and _rounding_error(value_a) and _rounding_error(value_b):
            continue
        if kind_a != kind_b or value_a != value_b:
            return False
    return True


def match_output(shown: list[str], printed: list[str],
                 varies: tuple[str, ...] = ()) -> str | None:
    """None when `printed` is what the page shows, else the first difference."""
    def match(i: int, j: int) -> bool:
        while i < len(shown):
            if shown[i].strip() == "...":
                return any(match(i + 1, k) for k in range(j, len(printed) + 1))
            if j >= len(printed) or not lines_match(shown[i], printed[j], varies):
                return False
            i, j = i + 1, j + 1
        return j == len(printed)

    if match(0, 0):
        return None
    # Say where: the longest prefix of the page that matches.
    j, gap = 0, False
    for i, line in enumerate(shown):
        if line.strip() == "...":
            gap = True
            continue
        if gap:
            gap = False
            found = next((k for k in range(j, len(printed))
                          if lines_match(line, printed[k], varies)), None)
            if found is None:
                return f"page line {i + 1}: {line!r} is not printed (after output line {j})"
            j = found
        if j >= len(printed):
            return f"the output ends before the page's line {i + 1}: {line!r}"
        if not lines_match(line, printed[j], varies):
            return f"page line {i + 1}: {line!r}\n  printed:     {printed[j]!r}"
        j += 1
    return f"the output goes on after the page's last line: {printed[j]!r}"


def expected_exit(shown: list[str]) -> int:
    text = "\n".join(shown)
    if "error:" in text:
        return 2
    if re.search(r"^verdict:\s+not equivalent", text, re.M):
        return 1
    return 0


# --- running a page's sessions -----------------------------------------------------

class Sandbox:
    """A directory a page's commands run in, as a reader's checkout would be: the
    repository's folders are links to it (the build folder to the build), `loom` is on
    the PATH, and Python finds the built package."""

    def __init__(self, where: pathlib.Path, source: pathlib.Path, build: pathlib.Path):
        self.dir = where
        where.mkdir(parents=True, exist_ok=True)
        for entry in source.iterdir():
            if entry.name in (".git", "build"):
                continue
            (where / entry.name).symlink_to(entry)
        (where / "build").symlink_to(build)
        tools = build / "tools"
        venv_bin = source / ".venv" / "bin"
        self.env = dict(os.environ)
        self.env.update({
            "PATH": os.pathsep.join([str(tools), str(venv_bin), self.env.get("PATH", "")]),
            "PYTHONPATH": str(build / "python"),
            "XDG_CACHE_HOME": str(where / ".cache"),
            "TERM": "dumb",
            "COLUMNS": "100",
        })
        self.env.pop("LOOM_DEMO_OUT", None)

    def run(self, command: str, timeout: float = 300) -> tuple[int, list[str]]:
        result = subprocess.run(["bash", "-c", command], cwd=self.dir, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=timeout, text=True)
        return result.returncode, result.stdout.splitlines()

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def check_block(block: Block, sandbox: Sandbox) -> list[str]:
    """Runs a block's commands; the problems found, each naming the page's line."""
    problems = []
    for setup in block.before:
        rc, out = sandbox.run(setup)
        if rc != 0:
            return [f"{block.name}: the set-up '{setup}' exited {rc}:\n" + "\n".join(out[-20:])]
    if block.info == "pycon":
        return check_pycon(block, sandbox)
    last_rc = None
    for command in block.commands():
        where = f"{block.page}:{command.line}: $ {command.text}"
        if command.text == "echo $?":
            if last_rc is None or command.output != [str(last_rc)]:
                problems.append(f"{where}: the page shows {command.output}, the exit status "
                                f"was {last_rc}")
            continue
        skipped = [why for prefix, why in block.not_run.items() if command.text.startswith(prefix)]
        if skipped:
            last_rc = None
            continue
        rc, printed = sandbox.run(command.text)
        last_rc = rc
        want = expected_exit(command.output)
        if rc != want:
            problems.append(f"{where}: exit status {rc}, the page implies {want}\n"
                            + "\n".join(printed[-30:]))
            continue
        if not command.output:
            continue   # the page shows no output: only the exit status is checked
        difference = match_output(command.output, printed, tuple(block.varies))
        if difference:
            problems.append(f"{where}: the output differs from the page's\n  {difference}\n"
                            "--- printed ---\n" + "\n".join(printed))
    return problems


def check_pycon(block: Block, sandbox: Sandbox) -> list[str]:
    """Runs a pycon block with doctest (after `import loom`)."""
    script = (
        "import doctest, sys, loom\n"
        f"text = sys.stdin.read()\n"
        "test = doctest.DocTestParser().get_doctest(text, {'loom': loom}, "
        f"{block.name!r}, {block.page!r}, {block.line})\n"
        "runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | "
        "doctest.NORMALIZE_WHITESPACE)\n"
        "runner.run(test)\n"
        "sys.exit(1 if runner.failures else 0)\n")
    python = pathlib.Path(sandbox.dir) / ".venv" / "bin" / "python3"
    result = subprocess.run([str(python), "-c", script], input="\n".join(block.body) + "\n",
                            cwd=sandbox.dir, env=sandbox.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=300)
    if result.returncode != 0:
        return [f"{block.name}: the Python session differs from the page's\n" + result.stdout]
    return []
