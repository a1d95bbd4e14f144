"""The manual stays true: docs/job-spec.md is what jobspec/spec.py renders, and every relative link in README.md and
docs/**/*.md (and every ``docs/sources.md#...`` citation in the code) reaches an existing file and heading."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (their brackets are not links)."""
    text = re.sub(r"^(`{3,}).*?^\1`*\s*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading ids of ``page`` (lower case, punctuation dropped, spaces -> '-', repeats get -1, -2, ...)
    plus explicit ``<a id=...>`` / ``<a name=...>`` anchors."""
    text = page.read_text(encoding="utf-8")
    found: set[str] = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    seen: dict[str, int] = {}
    for heading in re.findall(
        r"^#{1,6}\s+(.+?)\s*#*\s*$", re.sub(r"^(`{3,}).*?^\1`*\s*$", "", text, flags=re.S | re.M), flags=re.M
    ):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_job_spec_doc_is_current():
    from paddlefit.jobspec.docs import job_spec_markdown

    doc = ROOT / "docs" / "job-spec.md"
    assert doc.exists() and doc.read_text(encoding="utf-8") == job_spec_markdown(), (
        "docs/job-spec.md is stale (a job-spec Field description in src/paddlefit/jobspec/spec.py changed): "
        "run `make docs`"
    )


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no heading #{anchor} in {dest.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines; move reference text into docs/"
    assert lines[2:5] == ["```bash", lines[3], lines[4]] and lines[3].startswith("make demo")
    assert lines[4].startswith("make test")
    text = "\n".join(lines)
    for verb in (
        "calibrate",
        "cost",
        "doctor",
        "export",
        "gpus",
        "image",
        "launch",
        "models",
        "plan",
        "profile",
        "report",
        "train",
        "tune",
    ):
        assert f"(docs/commands/{verb}.md)" in text, verb
        assert (ROOT / "docs" / "commands" / f"{verb}.md").exists(), verb


@pytest.mark.parametrize("tree", ["src", "bench", "tests"])
def test_source_citations_resolve(tree):
    anchors = _anchors(ROOT / "docs" / "sources.md")
    bad = []
    for f in sorted((ROOT / tree).rglob("*.py")):
        for anchor in re.findall(r"docs/sources\.md#([\w-]+)", f.read_text(encoding="utf-8")):
            if anchor not in anchors:
                bad.append(f"{f.relative_to(ROOT)}: docs/sources.md#{anchor}")
    assert not bad, "citations of missing sources.md headings:\n" + "\n".join(bad)


def test_bench_run_all_keeps_the_other_blocks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    doc = (
        "# B\n\n## a\n\nkept a\n<!-- bench:a:start -->\nold a\n<!-- bench:a:end -->\nnote a\n\n## b\n"
        "<!-- bench:b:start -->\nold b\n<!-- bench:b:end -->\n"
    )
    new = run_all.merge(
        doc,
        {
            "b": "<!-- bench:b:start -->\nnew b \\1\n<!-- bench:b:end -->",
            "c": "<!-- bench:c:start -->\nnew c\n<!-- bench:c:end -->",
        },
    )
    assert "old a" in new and "kept a" in new and "note a" in new and "old b" not in new
    assert "new b \\1" in new and new.rstrip().endswith("## c\n\n<!-- bench:c:start -->\nnew c\n<!-- bench:c:end -->")
    assert set(run_all.BENCHES) == {p.stem for p in (ROOT / "bench").glob("*.py")} - {
        "run_all",
        "bench_models",
        "published_models",
        "host_overhead",  # host_overhead measures, it judges nothing
        "paddleclas_data",
    }  # builds bench/data/paddleclas_v100_trt_fp32.csv from PaddleClas's model list
    assert run_all.first_sentence(ROOT / "bench" / "plan_speed.py").startswith("Plan speed: wall time")


def test_the_full_example_spec_in_the_guide_validates_and_names_every_key():
    import yaml

    from paddlefit.jobspec.spec import JobSpec

    text = (ROOT / "docs" / "guides" / "examples.md").read_text(encoding="utf-8")
    doc = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    spec = JobSpec(**doc)
    assert set(doc) == set(JobSpec.model_fields) and spec.data.num_workers == 8


#: `docker run` options the doctor and image pages explain (they are Docker's, not paddlefit's)
DOCKER_RUN_OPTIONS = {"--ipc", "--shm-size", "--gpus", "--rm", "--privileged"}


def test_every_cli_option_is_in_its_command_page_and_no_page_names_a_gone_option():
    """The command pages are written by hand (more than `--help` says), so they are checked against the CLI: every
    option of a verb appears on its page, and every `--option` its Options table names exists (on that verb, or on
    another verb the row refers to)."""
    import typer.main

    from paddlefit.cli.main import app

    group = typer.main.get_command(app)
    every = {
        o
        for cmd in group.commands.values()
        for p in cmd.params
        for o in [*p.opts, *getattr(p, "secondary_opts", [])]
        if o.startswith("--")
    }
    missing, gone = [], []
    for verb, cmd in sorted(group.commands.items()):
        page = (ROOT / "docs" / "commands" / f"{verb}.md").read_text(encoding="utf-8")
        opts = {o for p in cmd.params for o in [*p.opts, *getattr(p, "secondary_opts", [])] if o.startswith("--")}
        for p in cmd.params:
            names = [o for o in [*p.opts, *getattr(p, "secondary_opts", [])] if o.startswith("-")]
            if (
                names
                and p.name != "help"
                and not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", page) for o in names)
            ):
                missing.append(f"{verb}: {names[0]}")
        section = page.split("## Options", 1)[-1].split("\n## ", 1)[0] if "## Options" in page else ""
        table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
        for named in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", table)):
            base = named.split("/")[0]
            if base not in opts and base not in every and base not in DOCKER_RUN_OPTIONS:
                gone.append(f"{verb}: {named}")
    assert missing == [], f"options missing from docs/commands/: {missing}"
    assert gone == [], f"docs/commands/ Options tables name options the CLI does not have: {gone}"


def test_doctor_page_lists_exactly_the_registered_checks():
    """A check's ID and slug are declared once, in its `@check` registration; the doctor page's table must list
    the same pairs (it adds what each check looks at and the fix)."""
    import paddlefit.diagnose.checks  # noqa: F401  (registers the checks)
    from paddlefit.diagnose.registry import REGISTRY

    page = (ROOT / "docs" / "commands" / "doctor.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| (PF\d{3}) ([a-z0-9-]+) \|", page, flags=re.M))
    assert listed == {(c.check_id, c.slug) for c in REGISTRY}


def test_bench_output_keeps_the_benchmarks_own_lines_only():
    """Docs/benchmarks.md carried Paddle's import warnings with the absolute path of the machine that ran
    it. run_all drops third-party warnings (and their source line) and writes paths relative to the repository."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    site = "/opt/venv/lib/python3.11/site-packages"
    raw = (
        f"{site}/paddle/utils/cpp_extension/extension_utils.py:712: UserWarning: No ccache found.\n"
        "  warnings.warn(warning_message)\n"
        f"config {ROOT}/examples/digits.yaml T4   0.35ms\n"
        f"{site}/paddle/nn/layer/norm.py:885: UserWarning: When training, we now always track\n"
        "  warnings.warn(\n"
        "  gemm_half  0.7935   rows that constrain it: 34\n"
    )
    assert run_all.clean_output(raw, [ROOT]) == (
        "config examples/digits.yaml T4   0.35ms\n  gemm_half  0.7935   rows that constrain it: 34"
    )
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "site-packages" not in text and "UserWarning" not in text and str(ROOT) not in text
    assert "/work/" not in text


def test_the_architecture_map_names_every_module() -> None:
    """docs/architecture.md says "one line a module": every module of the package is named in it (its file name in
    backticks, or its path under src/paddlefit)."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    pkg = ROOT / "src" / "paddlefit"
    missing = [
        str(p.relative_to(pkg))
        for p in sorted(pkg.rglob("*.py"))
        if p.name != "__init__.py" and f"`{p.name}`" not in doc and str(p.relative_to(pkg)) not in doc
    ]
    assert missing == []
