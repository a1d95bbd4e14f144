"""Each option written once: every command's typer parameters come from :mod:`paddlefit.options`, each flag is
declared by one record there, the request models name their options through those records, and no command
function takes more than a handful of parameters."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import typer

from paddlefit import options
from paddlefit.cli.main import app
from paddlefit.cli.params import help_text
from paddlefit.validation import RequestModel

SRC = Path(__file__).resolve().parents[2] / "src" / "paddlefit"
RECORDS = {name: o for name, o in vars(options).items() if isinstance(o, options.Option)}


def _commands() -> dict[str, object]:
    """Every verb's callback, ``runs`` and its sub-verbs included, by command line."""
    found = {c.name: c.callback for c in app.registered_commands}
    for group in app.registered_groups:
        sub = group.typer_instance
        found[group.name] = sub.registered_callback.callback  # type: ignore[union-attr]
        found.update({f"{group.name} {c.name}": c.callback for c in sub.registered_commands})
    return found


def _request_models() -> list[type[RequestModel]]:
    """Every request model of the package (imported, so each subclass is defined)."""
    import importlib
    import pkgutil

    import paddlefit

    for mod in pkgutil.walk_packages(paddlefit.__path__, "paddlefit."):
        if ".cli" not in mod.name and not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)
    seen: list[type[RequestModel]] = []
    todo = [RequestModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("paddlefit.") and sub not in seen:
                seen.append(sub)
                todo.append(sub)
    return seen


def test_every_command_parameter_is_an_option_record() -> None:
    """Each verb's typer parameters are exactly the records it was declared with, with their flags, help and
    default: typer reads nothing written elsewhere."""
    group = typer.main.get_command(app)
    for line, callback in _commands().items():
        records = callback.options  # type: ignore[attr-defined]
        assert records, line
        cmd = group
        for word in line.split():
            cmd = cmd.commands[word]  # type: ignore[attr-defined]
        params = {p.name: p for p in cmd.params}
        assert list(params) == [o.name for o in records], line
        for o in records:
            p = params[o.name]
            assert p.help == help_text(o), (line, o.name)
            declared = [*p.opts, *p.secondary_opts] if not o.argument else [o.name]
            flags = [f for d in o.decls for f in d.split("/")] if not o.argument else [o.name]
            assert sorted(declared) == sorted(flags), (line, o.name)
            assert p.default == (None if o.default is ... else o.default), (line, o.name)


def test_each_flag_is_declared_by_one_record() -> None:
    """Records that share a flag are one base and its ``but()`` meanings (same declaration), and no two records
    share a help text: a text written once."""
    by_flag: dict[str, set[tuple[str, ...]]] = {}
    for o in RECORDS.values():
        for d in o.decls:
            for flag in d.split("/"):
                by_flag.setdefault(flag, set()).add(o.decls)
    assert {f: d for f, d in by_flag.items() if len(d) > 1 and f.startswith("--")} == {
        "--model": {("--model", "-m"), ("--model",)},
        "--out": {("--out",), ("--out", "-o")},
    }
    helps: dict[str, list[str]] = {}
    for name, o in RECORDS.items():
        helps.setdefault(o.help, []).append(name)
    assert [names for names in helps.values() if len(names) > 1] == []
    # the source declares each flag tuple in one Option(...) call; the rest are but()
    tree = ast.parse((SRC / "options.py").read_text(encoding="utf-8"))
    decls = [
        ast.literal_eval(call.args[1])
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "Option" and len(call.args) > 1
    ]
    assert len(decls) == len(set(decls)) > 100


def test_no_option_is_declared_outside_the_records() -> None:
    """``typer.Option``/``typer.Argument`` are built from records only: outside ``cli/params.py`` (which builds
    them all but the root's eager ``--version``) no such call writes a flag or a help text."""
    offenders = []
    for p in SRC.rglob("*.py"):
        for call in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("Option", "Argument")
                and getattr(call.func.value, "id", "") == "typer"
                and (
                    p.name != "main.py"
                    or any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in ast.walk(call))
                )
                and p.name != "params.py"
            ):
                offenders.append(f"{p.name}:{call.lineno}")
    assert offenders == []


def test_command_functions_take_few_parameters() -> None:
    """No function of the CLI takes more than 8 parameters (a verb takes its one ``Args``)."""
    wide = []
    for p in (SRC / "cli").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and len(node.args.args) + len(node.args.kwonlyargs) > 8:
                wide.append(f"{p.name}:{node.name}")
    assert wide == []
    assert all(len(inspect.signature(inspect.unwrap(c)).parameters) >= 1 for c in _commands().values())


def test_request_fields_name_their_option_through_the_records() -> None:
    """A request field that stands for an option names a flag of a record; no request writes a flag in its
    ``OPTIONS`` table (that table is for job-spec keys)."""
    flags = {o.flag for o in RECORDS.values()}
    models = _request_models()
    assert len(models) >= 10
    named = 0
    for model in models:
        for field, info in model.model_fields.items():
            extra = info.json_schema_extra
            if isinstance(extra, dict) and "flag" in extra:
                assert extra["flag"] in flags, (model.__name__, field)
                named += 1
        assert not [v for v in model.OPTIONS.values() if v.startswith("-") or v.isupper()], model.__name__
    assert named > 60


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "lenet", "--top", "5"], "`--top` only applies to the parallel planner"),
        (["plan", "resnet18", "--inference", "--gpus-per-node", "8"], "`--gpus-per-node` does not apply"),
        (["cost", "lenet", "--inference", "--no-runs", "--wide"], "`--wide`, `--no-runs` do not apply"),
    ],
)
def test_an_option_typed_at_its_default_is_still_refused_where_it_does_not_apply(argv: list[str], needle: str) -> None:
    """A mode refuses the options it does not use when they are typed, whatever their value: `--top 5` is
    typed, even though 5 is the parallel planner's default (the check asks the parser, not the value)."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert needle in " ".join(result.output.split())


def test_a_default_the_core_applies_is_shown_from_the_record_it_reads() -> None:
    """A default written in the help (``[32]``) is the record's ``shown`` figure, and the core's field or constant
    is that same figure, read from the record: change it in one place and both follow."""
    from paddlefit.cli.export import DEFAULT_BATCH_SIZES
    from paddlefit.jobspec.spec import JobSpec
    from paddlefit.llm.search import LLMPlanRequest
    from paddlefit.plan.request import DEFAULT_PROBE_TIMEOUT_S, PlanRequest
    from paddlefit.serving.job import DEFAULT_BATCHES, DEFAULT_CPU_BUDGET_S

    assert "[32]" in options.BATCH_SIZE.help and "[1, 8, 32]" in options.BATCH_SIZE.help
    assert "{" not in options.BATCH_SIZE_EXPORT.help
    assert PlanRequest(model="lenet").batch_size == JobSpec(model="lenet").batch_size == 32
    assert (
        DEFAULT_BATCHES == (1, 8, 32) and DEFAULT_BATCH_SIZES == (1, 8) and "[1, 8]" in options.BATCH_SIZE_EXPORT.help
    )
    assert DEFAULT_PROBE_TIMEOUT_S == 600.0 and "[600]" in options.PROBE_TIMEOUT.help
    assert DEFAULT_CPU_BUDGET_S == 20.0 and "[20]" in options.CPU_BUDGET_S.help
    assert LLMPlanRequest(model="llama-2-7b").gpus == 8 and "[8]" in options.GPUS.help
    llm, spec = LLMPlanRequest(model="llama-2-7b"), JobSpec(model="lenet")
    assert (spec.precision.value, llm.precision.value) == ("fp32", "bf16-o2") and (
        spec.optimizer.value,
        llm.optimizer,
    ) == (
        "adam",
        "adamw",
    )
    assert "[fp32; parallel planner: bf16-o2]" in help_text(options.PRECISION).replace("\\", "")
    assert "[adam]" in help_text(options.OPTIMIZER_COST).replace("\\", "")
    assert not [o.name for o in RECORDS.values() if "{" in o.help and "}" in o.help and o.shown]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", ""], "`MODEL` is empty"),
        (["cost", "", "--json"], "`MODEL` is empty"),
        (["runs", "--model", ""], "`--model` is empty"),
        (["launch", "examples/digits.yaml", "-t", "local", "--out", ""], "the path is empty"),
        (["launch", "examples/digits.yaml", "-t", "local", "--port", "8090"], "`--port` does not apply"),
        (["launch", "examples/digits.yaml", "-t", "kubeflow", "--image", "a/b:1", "--setup", "x"], "`--setup`"),
        (["plan", "llama-2-7b", "--no-runs"], "`--no-runs` not used by the parallel planner"),
        (["cost", "lenet", "--inference", "--top", "0"], "`--top` must be >= 1 (got 0)"),
        (["gpus", "--json", "--csv"], "give one of them"),
        (["train", "examples/digits.yaml", "--overwrite"], "goes with `--resume never`"),
        (["plan", "lenet", "--max-probe-gib", "1e300", "--json"], "`--max-probe-gib` must be a finite number > 0"),
        (["runs", "--json", "show", "1"], "`--json` applies to the list of runs"),
        (["image", "/nonexistent/job.yaml"], "`CONFIG /nonexistent/job.yaml` cannot be read"),
        (["runs", "compare", "1"], "Missing argument 'RUN_B'"),
        (["tune", "examples/digits.yaml", "--confirm", "-1"], "`--confirm` must be 1..20 (got -1)"),
        (["profile", "examples/digits.yaml", "--steps", "1"], "`--steps` must be 3..100000 (got 1)"),
        (["launch", "examples/digits.yaml", "-t", "local", "--gpus-per-node", "0", "--no-ib"], "`--no-ib` sets NCCL"),
        (["doctor", "--from", "examples/digits.yaml", "--measure"], "`--measure/--no-measure` check this machine"),
        (["train", "examples/digits.yaml", "--resume", "never", "--trust-checkpoint"], "loads none"),
    ],
)
def test_empty_stray_and_conflicting_options_are_refused(argv: list[str], needle: str) -> None:
    """Values that would be ignored or misread (an empty name or path, an option the target or mode does not
    use, two outputs at once) exit 2 naming the option, before any work."""
    from typer.testing import CliRunner

    root = Path(__file__).resolve().parents[2]
    argv = [str(root / a) if a.startswith("examples/") else a for a in argv]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert needle in " ".join(result.output.split())


def test_a_range_several_requests_check_is_written_once() -> None:
    """An option that several request fields stand for keeps its range on its record (``bounds``), spread into
    each field: no such field writes ``ge``/``gt``/``le``/``lt`` itself; and the range holds (``--batch-size
    0`` is refused by every request that takes it)."""
    import re

    from paddlefit.errors import PaddlefitError
    from paddlefit.job.resolve import JobOptions
    from paddlefit.plan.request import PlanRequest

    calls: dict[str, list[ast.Call]] = {}
    for p in SRC.rglob("*.py"):
        src = p.read_text(encoding="utf-8")
        for call in ast.walk(ast.parse(src)):
            if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "Field":
                for k in call.keywords:
                    m = re.fullmatch(r"options\.(\w+)\.field\(\)", ast.get_source_segment(src, k.value) or "")
                    if k.arg == "json_schema_extra" and m:
                        calls.setdefault(m.group(1), []).append(call)
    shared = {name: cs for name, cs in calls.items() if len(cs) > 1}
    assert {"BATCH_SIZE", "SAFETY_MARGIN", "DEVICES", "PORT"} <= set(shared)
    written = [
        name for name, cs in shared.items() for c in cs if {k.arg for k in c.keywords} & {"ge", "gt", "le", "lt"}
    ]
    assert written == []
    for build in (lambda: PlanRequest(model="lenet", batch_size=0), lambda: JobOptions(batch_size=0)):
        with pytest.raises(PaddlefitError, match=re.escape("`--batch-size` must be 1..10000000")):
            build()
