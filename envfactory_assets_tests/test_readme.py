"""The README stays a front door and the docs stay linked: length, quick start, no release narration, links.

Each rule is a function over the text, run on the repository's README.md and docs/*.md; the rules that
search for something are also run on a sample that breaks them, so a rule that stopped matching would fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envfactory_assets.reporting.results_table import markers, replace_between_markers

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MAX_LINES = 200
#: A user must find what to run, and what a first run gives, within this many lines.
FRONT_LINES = 50
#: Pages another change generates and the README already links to; the link check skips them only while
#: they do not exist (once written, their links and anchors are checked like any other page's).
GENERATED_ELSEWHERE = {REPO / "docs" / "configuration.md"}

_MARKED_BLOCK = re.compile(r"<!-- ([a-z0-9_:]+):start -->.*?<!-- \1:end -->", re.S)
_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
_LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
# a commit id: 7 to 40 hex digits with at least one digit and one letter, as a word of its own (the `_`
# of `ckpt_b50165c15f20ddd2` joins it to its prefix, so row ids do not match)
_COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
_NARRATION = [
    (re.compile(r"\breleases?\b", re.I), "release narration"),
    # "run 7", "run #7", "session 2", and a store named after its run ("run8.duckdb")
    (re.compile(r"\b(?:run|session)\s*#?\s*\d+\b", re.I), "an earlier run by number"),
]


def outside_written_blocks(text: str) -> str:
    """``text`` without the blocks code writes between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
    (``envfactory results --into``): tables the pipeline writes may name whatever their rows hold."""
    return _MARKED_BLOCK.sub("", text)


def narration_problems(text: str) -> list[str]:
    """Each commit id, release narration or earlier run named by number in ``text``'s hand-written prose,
    as ``"<kind>: <match>"``."""
    prose = outside_written_blocks(text)
    problems = [f"a commit id: {m[0]}" for m in _COMMIT.finditer(prose)]
    for pattern, kind in _NARRATION:
        problems += [f"{kind}: {m[0]}" for m in pattern.finditer(prose)]
    return problems


def section(text: str, title: str) -> tuple[int, str]:
    """The 1-based line where the ``## title`` heading stands and the section's text up to the next ``## ``
    heading. Raises AssertionError when the heading is missing."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == f"## {title}"]
    assert len(starts) == 1, f"README.md: expected one '## {title}' heading, found {len(starts)}"
    start = starts[0]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start + 1, "\n".join(lines[start:end])


def fenced_commands(text: str) -> list[list[str]]:
    """The commands of each fenced block in ``text``: its non-empty lines that are not comments."""
    blocks = []
    for block in _FENCE.findall(text):
        body = block.splitlines()[1:-1]
        blocks.append([line.strip() for line in body if line.strip() and not line.lstrip().startswith("#")])
    return blocks


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """Every relative link of ``page`` whose file does not exist, or whose ``#anchor`` names no heading of
    its target, as ``"<page relative to root>: <link>"``. Links inside fenced code and absolute URLs are
    not checked."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    problems = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if dest in GENERATED_ELSEWHERE and not dest.exists():
            continue
        if not dest.exists():
            problems.append(f"{page.relative_to(root)}: {target} (no such file)")
            continue
        if fragment and dest.suffix == ".md":
            dest_text = _FENCE.sub("", dest.read_text(encoding="utf-8"))
            headings = {anchor(h) for h in re.findall(r"^#{1,6} (.+)$", dest_text, re.M)}
            if fragment not in headings:
                problems.append(f"{page.relative_to(root)}: {target} (no heading #{fragment})")
    return problems


def test_readme_is_at_most_200_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES}): move the depth into docs/"


def test_readme_names_no_commit_release_or_earlier_run_outside_written_tables():
    problems = narration_problems(README.read_text(encoding="utf-8"))
    assert not problems, f"README.md: {problems}; measured figures belong in docs written by a command"


def test_the_narration_rule_catches_each_kind_and_spares_written_tables():
    sample = (
        "Took 23 min at commit `fbbde86` in this release; an earlier run 7 had more, as had run8.duckdb.\n"
        "<!-- results:start -->\n| `ckpt_b50165c15f20ddd2` | fbbde86 | release |\n<!-- results:end -->\n"
        "Row ids such as ref_7d00aa848c5c0dc2 and counts such as 1636 or 2605 are fine.\n"
    )
    found = narration_problems(sample)
    assert found == [
        "a commit id: fbbde86",
        "release narration: release",
        "an earlier run by number: run 7",
        "an earlier run by number: run8",
    ], found


def test_quick_start_is_two_commands_in_one_fenced_block_the_second_being_what_ci_runs():
    _, quick = section(README.read_text(encoding="utf-8"), "Quick start")
    blocks = fenced_commands(quick)
    assert len(blocks) == 1, f"Quick start: expected one fenced block, found {len(blocks)}"
    assert len(blocks[0]) == 2, f"Quick start: expected two commands, found {blocks[0]}"
    setup_and_run, setup_and_test = blocks[0]
    assert setup_and_run.startswith("scripts/setup.sh && ") and setup_and_run.endswith("/envfactory run")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert setup_and_test == ci, f"Quick start's test command {setup_and_test!r} is not what .ci/run runs ({ci!r})"


def test_a_user_finds_what_to_run_and_what_it_gives_within_the_first_50_lines():
    text = README.read_text(encoding="utf-8")
    quick_line, quick = section(text, "Quick start")
    fence_end = quick_line + quick.splitlines().index("```", 2)
    assert fence_end <= FRONT_LINES, f"the quick start's commands end on line {fence_end} (> {FRONT_LINES})"
    gives_line, _ = section(text, "What a first run gives")
    assert gives_line <= FRONT_LINES, f"'What a first run gives' starts on line {gives_line} (> {FRONT_LINES})"


def test_first_run_figures_are_those_of_the_report_and_the_readme_names_the_command_that_writes_it():
    text = README.read_text(encoding="utf-8")
    _, gives = section(text, "What a first run gives")
    assert "envfactory report --output docs/default_run.md" in gives
    report = (REPO / "docs" / "default_run.md").read_text(encoding="utf-8")
    report_numbers = set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", report))
    rows = [line.split("|")[2] for line in gives.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows, "'What a first run gives' has no table"
    figures = [n for cell in rows for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", cell)]
    assert figures, rows
    missing = [n for n in figures if n not in report_numbers]
    assert not missing, f"figures in README.md's first-run table not in docs/default_run.md: {missing}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_points_to_a_file_and_heading_that_exist(page):
    assert not broken_links(page)


def test_the_link_rule_catches_a_missing_file_and_a_missing_heading(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\n## Where it is\n", encoding="utf-8")
    page = docs / "b.md"
    page.write_text(
        "[ok](a.md#where-it-is) [gone](c.md) [bad](a.md#nowhere) [web](https://x.org/y.md)\n"
        "```\n[in code](not_checked.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, tmp_path) == [
        "docs/b.md: c.md (no such file)",
        "docs/b.md: a.md#nowhere (no heading #nowhere)",
    ]


def test_the_results_markers_live_in_docs_evaluation_and_accept_a_table():
    page = REPO / "docs" / "evaluation.md"
    text = page.read_text(encoding="utf-8")
    for name in (None, "cpu_benchmark"):
        start, end = markers(name)
        new = replace_between_markers(text, "TABLE", name)
        assert f"{start}\nTABLE\n{end}" in new
    assert "envfactory results --into docs/evaluation.md" in text


#: commands whose argument is an id of the run, and which positional argument it is (exclude/include: after the kind)
ID_ARGUMENT = {"show": 0, "lineage": 0, "serve-env": 0, "exclude": 1, "include": 1}
EXAMPLE_PAGES = (README, *DOCS)
DEFAULT_RUN = REPO / "docs" / "default_run.md"


def example_command_ids(text: str) -> list[str]:
    """Every id that an example command of ``text`` passes to a command of :data:`ID_ARGUMENT`
    (``envfactory show ref_...``, ``envfactory exclude resource helpdesk``), in fenced blocks and in inline code
    spans; a ``<placeholder>`` or an upper-case name (``ENV_ID``) is no id."""
    import shlex

    ids = []
    inline = [[span] for span in re.findall(r"`([^`\n]*envfactory [^`\n]*)`", _FENCE.sub("", text))]
    for block in fenced_commands(text) + inline:
        for line in block:
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            for i, word in enumerate(words[:-1]):
                command = words[i + 1]
                if not word.endswith("envfactory") or command not in ID_ARGUMENT:
                    continue
                positional = []
                for arg in words[i + 2 :]:
                    if arg.startswith("-"):
                        break
                    positional.append(arg)
                index = ID_ARGUMENT[command]
                if len(positional) > index and not (positional[index].startswith("<") or positional[index].isupper()):
                    ids.append(positional[index])
    return ids


def examples_block(text: str) -> str | None:
    """The text between ``<!-- examples:start -->`` and ``<!-- examples:end -->`` (written by ``envfactory
    report``), or None when there is none."""
    from envfactory_assets.reporting.report import EXAMPLES_MARKER

    start, end = f"<!-- {EXAMPLES_MARKER}:start -->", f"<!-- {EXAMPLES_MARKER}:end -->"
    if start not in text or end not in text.split(start, 1)[1]:
        return None
    return text.split(start, 1)[1].split(end, 1)[0]


def test_every_id_the_example_commands_name_is_one_of_the_default_runs_examples():
    """An example id is one the current default run has: ``envfactory report`` writes them into
    docs/default_run.md's examples block, and every id an example command of the README or a page of docs/
    names must be there (an id of an earlier run fails where a reader tries it)."""
    block = examples_block(DEFAULT_RUN.read_text(encoding="utf-8"))
    assert block is not None, (
        "docs/default_run.md has no examples block: regenerate it with envfactory report --output docs/default_run.md"
    )
    for page in EXAMPLE_PAGES:
        stale = [i for i in example_command_ids(page.read_text(encoding="utf-8")) if f"`{i}`" not in block]
        assert not stale, (
            f"{page.relative_to(REPO)}: example ids {stale} are not in docs/default_run.md's examples block "
            "(use the ids listed there, or a <placeholder>)"
        )


def test_the_example_id_rule_finds_ids_skips_placeholders_and_reads_the_block():
    sample = (
        "```bash\n"
        ".venv/bin/envfactory show ref_7d00aa848c5c0dc2\n"
        "envfactory lineage <checkpoint-id>   # a placeholder\n"
        'envfactory exclude resource helpdesk --reason "licence unclear"   # a resource key\n'
        "envfactory serve-env bookshop_example\n"
        "envfactory status\n"
        "```\n"
        "Inline: `envfactory show ref_0123456789abcdef` and `envfactory serve-env ENV_ID --http`.\n"
    )
    assert example_command_ids(sample) == [
        "ref_7d00aa848c5c0dc2",
        "helpdesk",
        "bookshop_example",
        "ref_0123456789abcdef",
    ]
    from envfactory_assets.reporting.report import examples_section

    written = "\n".join(examples_section({"trajectory": "ref_7d00aa848c5c0dc2", "resource": "helpdesk"}))
    block = examples_block("# Report\n\n" + written)
    assert "`ref_7d00aa848c5c0dc2`" in block and "`helpdesk`" in block and "`bookshop_example`" not in block
    assert examples_block("# Report without examples\n") is None
