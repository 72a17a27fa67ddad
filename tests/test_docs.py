"""The user docs stay true: every yggc command line in README.md parses with yggc's own parser, every tools/ script
and docs page that README.md, CHANGELOG.md and docs/ name exists, they stay short, every benchmark table says where,
when, at which commit and by which command it was measured, and no text in the project is a development diary."""
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from yggc.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PLACEHOLDER = "X"  # stands for $VAR and $(...) when a line is parsed
DIARY_WORD = "sess" "ion"  # spelt in two pieces so that this file passes its own check


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def commands(block: str) -> list[list[str]]:
    """The simple commands of a bash block: continuations joined, comments dropped, split at && ; | and
    $(...) (whose inner command counts too), variables replaced by a placeholder."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        inner = re.findall(r"\$\(([^()]*)\)", line)
        line = re.sub(r"\$\([^()]*\)", PLACEHOLDER, line)
        for part in [*re.split(r"&&|;|\|", line), *inner]:
            words = shlex.split(part, comments=True)
            words = [re.sub(r"\$\{?\w+\}?", PLACEHOLDER, w) for w in words if not re.fullmatch(r"\w+=\S*", w)]
            if words:
                out.append(words)
    return out


def yggc_args(words: list[str]) -> list[str] | None:
    """The arguments after `yggc` (however it is started), or None for another program."""
    if words[0].endswith("yggc"):
        return words[1:]
    for i, w in enumerate(words[:-1]):
        if w == "-m" and words[i + 1] in ("yggc", "yggc.cli"):
            return words[i + 2:]
    return None


README_COMMANDS = [c for block in bash_blocks(README.read_text()) for c in commands(block)]


def test_readme_is_short_and_has_its_two_setup_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    setup = [c for c in bash_blocks(text) if c.startswith("python3 -m venv .venv")]
    assert len(setup) == 2 and "yggc pull smollm2" in setup[0] and "pytest -q" in setup[1]


@pytest.mark.parametrize("args", [a for c in README_COMMANDS if (a := yggc_args(c)) is not None],
                         ids=lambda a: " ".join(a)[:60])
def test_every_yggc_line_in_the_readme_parses(args):
    try:
        build_parser().parse_args(args)
    except SystemExit as e:  # argparse's way of refusing a line (it prints why to stderr)
        pytest.fail(f"yggc {' '.join(args)}: exit {e.code}")


def test_every_script_and_page_the_readme_names_exists():
    text = README.read_text()
    scripts = set(re.findall(r"\btools/\w+\.py", text))
    links = set(re.findall(r"\]\(([^)#]+)\)", text))
    assert scripts and links
    assert sorted(p for p in scripts | links if not (ROOT / p).exists()) == []


DOC_FILES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
NAMED_PATH = re.compile(r"(?<![\w./-])((?:tools|docs)/[\w./-]*\w)")  # tools/x.py, docs/benchmarks/ (not a/docs/b)


def named_paths(text: str) -> set[str]:
    """Every tools/... or docs/... path a text names (in a link, in code or in prose)."""
    return set(NAMED_PATH.findall(text))


def test_every_tools_and_docs_path_named_in_the_docs_exists():
    """README.md, CHANGELOG.md and docs/ name only scripts and pages that exist (a retired script is named by its
    file name and the commit that had it), and every relative link points at a file."""
    missing = []
    for doc in DOC_FILES:
        text = doc.read_text()
        missing += [f"{doc.relative_to(ROOT)}: {p}" for p in sorted(named_paths(text)) if not (ROOT / p).exists()]
        prose = re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))  # code is not a link
        links = re.findall(r"\]\(([^)#\s]+)", prose)
        missing += [f"{doc.relative_to(ROOT)}: link {t}" for t in links
                    if not t.startswith(("http://", "https://", "mailto:")) and not (doc.parent / t).exists()]
    assert missing == []


def test_benchmark_pages_and_the_changelog_hold_todays_results_only():
    """A new measurement replaces the old one (git keeps history): each benchmarks page at most 200 lines, the folder
    at most 1,200, CHANGELOG.md (written for users) at most 200."""
    pages = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "docs" / "benchmarks").glob("*.md")}
    assert {name: n for name, n in pages.items() if n > 200} == {} and sum(pages.values()) <= 1200
    assert len((ROOT / "CHANGELOG.md").read_text().splitlines()) <= 200


def test_named_paths_are_found_in_prose_code_and_links_only_at_their_start():
    text = "see `tools/bench_x.py --a`, [p](docs/benchmarks/moe.md), docs/gpu.md. Not yggc/docs/x.md or x-tools/y"
    assert named_paths(text) == {"tools/bench_x.py", "docs/benchmarks/moe.md", "docs/gpu.md"}


def test_the_readme_parser_sees_through_chains_substitutions_and_comments():
    got = commands('M=$(.venv/bin/yggc pull smollm2) && .venv/bin/yggc run -m $M -p "a # b" # note\n'
                   "torchrun --nproc-per-node 2 -m yggc run \\\n  -m V")
    assert got == [[".venv/bin/yggc", "run", "-m", "X", "-p", "a # b"], [".venv/bin/yggc", "pull", "smollm2"],
                   ["torchrun", "--nproc-per-node", "2", "-m", "yggc", "run", "-m", "V"]]
    assert [yggc_args(c) for c in got] == [["run", "-m", "X", "-p", "a # b"], ["pull", "smollm2"], ["run", "-m", "V"]]


def test_no_development_diary_in_the_project():
    """Code, tests and docs state facts and reasons, not the sitting they came from: DIARY_WORD appears only as
    pytest's own fixture scope (JSON data such as a tokenizer's vocabulary is not prose)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py", "*.md", "*.txt", "*.toml",
                            "*.cfg", "*.c", "*.cpp", "*.sh", ".ci/*"], cwd=ROOT, capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    hits = []
    for name in files.stdout.split():
        if not (ROOT / name).is_file():  # tracked, but deleted in the working tree
            continue
        for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
            if re.search(rf"\b{DIARY_WORD}\b", line.replace(f'scope="{DIARY_WORD}"', ""), flags=re.I):
                hits.append(f"{name}:{n}: {line.strip()[:80]}")
    assert hits == []


# a measured time or speed-up as code comments and docstrings quote one: "8.3 ms", "45 us", "1.5x faster", "68 GB/s"
MEASURED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:\s?(?:ms|us|µs)\b|x (?:faster|slower|as fast|cheaper)|\s?GB/s"
                      r"|% (?:faster|slower))")  # a number, not a name's digits (p90 ms)


def test_no_code_comment_or_docstring_quotes_a_measured_time():
    """The package's code says what it does and why it is shaped so, and links the benchmark page for the numbers,
    which change with every measurement (tests/ and tools/ time things and are left out)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "yggc", "passes", "graphs"], cwd=ROOT,
                           capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    hits = []
    for name in files.stdout.split():
        if name.endswith((".py", ".cpp", ".h", ".c")) and (ROOT / name).is_file():
            for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1):
                if MEASURED.search(line):
                    hits.append(f"{name}:{n}: {line.strip()[:90]}")
    assert hits == []


def test_a_quoted_time_is_found_and_a_unit_in_code_is_not():
    assert [bool(MEASURED.search(t)) for t in ("# 11.3-11.5 ms against 8.3 now", "(about 45 us)", "1.16x faster",
                                               "at 68 GB/s", "5-14% faster", 'f"{ms:.2f} ms"', "timeout_ms = 5",
                                               "TPOT p90 ms")] == [True] * 5 + [False] * 3


def tables_with_context(page: str) -> list[tuple[str, str]]:
    """(first line of the table's section, the text that documents it): its own section plus the page's Setup."""
    sections = re.split(r"\n(?=#{2,4} )", page)
    setup = next((s for s in sections if s.startswith("## Setup")), "")
    out = []
    for section in sections:
        lines = section.splitlines()
        if any(a.startswith("|") and re.fullmatch(r"\|[-| :]+\|", b) for a, b in zip(lines, lines[1:])):
            out.append((lines[0], section + "\n" + setup))
    return out


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs" / "benchmarks").glob("*.md")
                                        if p.name != "README.md"))
def test_every_benchmark_table_names_machine_date_commit_and_command(page):
    missing = []
    for heading, text in tables_with_context((ROOT / "docs" / "benchmarks" / page).read_text()):
        has = {"machine": re.search(r"\bmachine\b", text, flags=re.I), "date": re.search(r"\b20\d\d-\d\d-\d\d\b", text),
               "commit": re.search(r"\b[0-9a-f]{7,40}\b", text), "command": "```bash" in text}
        missing += [f"{heading}: no {what}" for what, found in has.items() if not found]
    assert missing == []


def test_a_table_without_its_command_is_found():
    page = ("# T\n\n## Setup\n\nMachine: Zen 4 · Date: 2026-11-27 · Commit: 0f0237d\n\n"
            "## A\n\n```bash\nyggc bench\n```\n\n| a |\n|---|\n| 1 |\n\n## B\n\n| b |\n|---|\n| 2 |\n")
    documented = {h: "```bash" in text for h, text in tables_with_context(page)}
    assert documented == {"## A": True, "## B": False}
