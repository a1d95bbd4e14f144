"""Inputs fuzzed, not hand-picked: every user-facing parser on generated input, near-valid and junk.

Parsers: the job spec (``load_job_spec``), ``--input`` specs, ``--model-arg`` values, GPU catalog CSVs, price
CSVs, calibration files, LLM model configs, doctor snapshots and the ``launch`` options. Inputs are mutations of
real valid files (``examples/*.yaml``, the shipped catalog CSVs, a calibration file ``paddlefit calibrate`` wrote,
the recorded snapshots) and junk (random text, unicode, huge numbers, NaN/inf, YAML tags, anchors, deep nesting,
BOM, CRLF).

Properties: a parser returns or raises a :class:`~paddlefit.errors.PaddlefitError` (anything else is a bug); a
command exits 0 or 2 with no traceback; a command that writes files changes nothing when it exits 2, and when it
exits 0 every file it wrote parses and no temp file is left. CI runs the ``ci`` profile (derandomized, bounded:
tests/conftest.py); ``pytest tests/test_fuzz.py --hypothesis-profile=long`` is the local soak.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from planmemo import memoised_probe
from trainrun import LAUNCH_SPEC
from typer.testing import CliRunner

from paddlefit.catalog.gpus import catalog_csv, catalog_docs, load_gpus
from paddlefit.catalog.price_csv import parse_price_csv
from paddlefit.cli.main import app
from paddlefit.deploy.launch import SPEC_DELIMITER, validate_skypilot_task
from paddlefit.errors import PaddlefitError
from paddlefit.jobspec.inputs import parse_input_spec, parse_input_specs
from paddlefit.jobspec.spec import JobSpec, load_job_spec
from paddlefit.models.transformer import TRANSFORMER_CONFIGS
from paddlefit.models.zoo import TRANSFORMER_ARGS, parse_model_args, resolve_model
from paddlefit.plan.calibration import load_calibrations
from paddlefit.units import MIB

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
CATALOG = ROOT / "src" / "paddlefit" / "catalog" / "data"


def examples(n: int) -> settings:
    """``n`` examples under the ``ci`` profile; under any other (``long``) that profile's ``max_examples`` scaled by
    ``n / 100``, so the slow CLI-level tests stay in proportion to the fast parser-level ones. The tests use
    module-scoped fixtures and some run commands (a few 100 ms each): those health checks are off."""
    count = n if settings.get_current_profile_name() == "ci" else max(n, settings().max_examples * n // 100)
    return settings(max_examples=count, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---- junk and hazards shared by every parser ---------------------------------------------------------------------

#: Text parsers commonly mishandle: empty, blank, option-like, control characters, quotes, shell syntax,
#: unicode line separators, a lone surrogate (argv decodes undecodable bytes to them), very long.
TEXT_HAZARDS = [
    "",
    " ",
    "-",
    "-x",
    "--help",
    "a\nb",
    "a\tb",
    "a\rb",
    "\x7f",
    "é",
    "日本語",
    "\u2028",
    "\ufeff",
    "\udcff",
    "$(touch pwned)",
    "`id`",
    "a;b",
    "'",
    '"',
    "\\",
    "..",
    "/",
    "~",
    "*",
    "%s",
    "{}",
    "[]",
    "null",
    "~",
    "true",
    "a" * 300,
    "x" * 5000,
]
#: Numbers as text that are not plain numbers, or are too large or small for what they stand for.
NUMBER_HAZARDS = [
    "0",
    "-0",
    "-1",
    "1.5",
    "1e308",
    "1e309",
    "-1e309",
    "1e-320",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1" + "0" * 30,
    "1" + "0" * 400,
    "9" * 5000,
    "0x10",
    "1_000",
    "٣",
    "1,5",
    "+1",
    "1e3",
    " 7 ",
    "007",
    "true",
    "2**31",
]
#: YAML that a safe loader must refuse or read as plain data: code tags, binary/set/timestamp tags, anchors,
#: directives, several documents, complex keys, tabs, a key given twice, a NUL escape.
YAML_HAZARDS = [
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system",
    "!!binary /w==",
    "!!set {a, b}",
    "!!timestamp 2001-12-14",
    "2001-12-14",
    "!!float nan",
    "!!int '1'",
    "!!str",
    "!foo x",
    "&a [1, 2]",
    "*a",
    "{a: &b 1, c: *b}",
    "%YAML 1.1\n---\nx",
    "---\na: 1\n---\nb: 2",
    "? [1, 2]\n: x",
    "\ta: 1",
    "{a: 1, a: 2}",
    '"\\0"',
    '"\\x00"',
    '"\\ud800"',
    "|\n  multi\n  line",
    ".inf",
    "0o17",
    "{",
    "[",
    "]",
    "}",
    ":",
    "- - -",
    "@x",
    "`x`",
]


def deep(depth: int, kind: str) -> str:
    """A value nested ``depth`` levels (flow lists, flow mappings or block lists)."""
    if kind == "flow-list":
        return "[" * depth + "1" + "]" * depth
    if kind == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    return "- " * depth + "1"


def one_in(n: int, rare: st.SearchStrategy, usual: st.SearchStrategy) -> st.SearchStrategy:
    """``rare`` one time in ``n``, else ``usual`` (the rare branch last: hypothesis favours small choices)."""
    return st.integers(0, n - 1).flatmap(lambda i: rare if i == n - 1 else usual)


hazard_text = st.one_of(st.sampled_from(TEXT_HAZARDS + NUMBER_HAZARDS), st.text(max_size=40))
#: Nested past the loaders' limit (32) and past Python's recursion limit. Rare below: PyYAML's pure scanner takes
#: ~0.4 s for a flow collection nested 900 deep on one line (each level is a possible key, checked per character).
deep_values = st.builds(
    deep, st.sampled_from([20, 40, 1100, 5000]), st.sampled_from(["flow-list", "flow-map", "block"])
)
yaml_scalar_text = one_in(
    10, deep_values, st.one_of(st.sampled_from(YAML_HAZARDS + NUMBER_HAZARDS + TEXT_HAZARDS), st.text(max_size=30))
)
#: JSON-able values, huge and non-finite numbers included.
plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.sampled_from([10**400, -(10**400), 2**63, 2**31])
    | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def text_mutation(draw: st.DrawFn, text: str) -> str:
    """``text`` with a few character-level changes (none half the time): a BOM, CRLF/CR line ends, an inserted
    hazard, a truncation."""
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
        op = draw(st.sampled_from(["bom", "crlf", "cr", "insert", "truncate", "append", "nul"]))
        at = draw(st.integers(0, len(text)))
        if op == "bom":
            text = "\ufeff" + text
        elif op == "crlf":
            text = text.replace("\n", "\r\n")
        elif op == "cr":
            text = text.replace("\n", "\r")
        elif op == "insert":
            text = text[:at] + draw(st.one_of(hazard_text, st.sampled_from(YAML_HAZARDS))) + text[at:]
        elif op == "truncate":
            text = text[:at]
        elif op == "append":
            text = text + "\n" + draw(st.one_of(hazard_text, st.sampled_from(YAML_HAZARDS), deep_values))
        else:
            text = text[:at] + "\x00" + text[at:]
    return text


#: How a text file is stored: UTF-8, with a BOM, or an encoding paddlefit refuses (UTF-16, Latin-1).
encodings = st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"])


def write_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding, errors="surrogateescape" if encoding.startswith("utf-8") else "replace"))
    return path


# ---- the properties ---------------------------------------------------------------------------------------------


def returns_or_refuses(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args)``'s result, or None when it raised a PaddlefitError (any other exception propagates: a bug)."""
    try:
        return fn(*args, **kwargs)
    except PaddlefitError as exc:
        assert str(exc).strip(), f"{fn.__name__} raised {type(exc).__name__} with no message"
        return None


RUNNER = CliRunner()


@contextmanager
def chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def cli(args: list[str], cwd: Path) -> Any:
    """Run ``paddlefit ARGS`` in-process in ``cwd``; the result must be exit 0, or 2 with a message, no traceback."""
    with chdir(cwd):
        r = RUNNER.invoke(app, args, env={"PADDLEFIT_DEBUG": None, "COLUMNS": "200"})
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(f"paddlefit {args!r} raised {type(r.exception).__name__}: {r.exception}") from r.exception
    assert r.exit_code in (0, 2), f"paddlefit {args!r} exited {r.exit_code}:\n{r.output[-2000:]}"
    assert "Traceback" not in r.output, r.output
    if r.exit_code == 2:
        assert r.stderr.strip(), f"paddlefit {args!r} exited 2 without a message"
    return r


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, and for files size, sha256 and mode (symlinks are not followed)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISREG(st_.st_mode):
                out[rel] = ("file", st_.st_size, hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(st_.st_mode))
            else:
                out[rel] = ("special", stat.S_IFMT(st_.st_mode))
    return out


TEMP_NAME = re.compile(r"(^|/)(\.[^/]*\.tmp|\.tmp-[^/]*|[^/]*\.tmp)$")


def written(before: dict[str, tuple], after: dict[str, tuple], code: int) -> list[str]:
    """The files a command wrote; on exit 2 there must be none and nothing else changed, and no temp file either
    way."""
    temps = [k for k in after if TEMP_NAME.search(k)]
    assert not temps, f"temp files left behind: {temps}"
    if code != 0:
        assert after == before, f"exit {code} changed the directory: {sorted(set(after.items()) ^ set(before.items()))}"
        return []
    gone = [k for k in before if k not in after]
    assert not gone, f"removed {gone}"
    return sorted(k for k, v in after.items() if v[0] == "file" and before.get(k) != v)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@contextmanager
def workdir(base: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir=base) as d:
        yield Path(d)


@pytest.fixture(scope="module")
def measured() -> Iterator[None]:
    """``plan``/``cost`` measure a model once (:func:`planmemo.memoised_probe`), so a fuzzed catalog, price or
    calibration file costs milliseconds."""
    with memoised_probe():
        yield


MLP = ["tinymodels:mlp", "--input", "float32[30]", "-b", "4"]


# ---- the job spec -----------------------------------------------------------------------------------------------

#: A spec `launch` and `train` accept (data.train and a length): tests/deploy/test_launch.py's.
LAUNCHABLE = LAUNCH_SPEC
VALID_SPECS = [yaml.safe_load(LAUNCHABLE)] + [
    yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "examples").glob("*.yaml"))
]
SECTIONS = {
    n: f.annotation for n, f in JobSpec.model_fields.items() if n in ("schedule", "data", "checkpoint", "budget")
}
SPEC_KEYS = [*JobSpec.model_fields] + [f"{s}.{k}" for s, m in SECTIONS.items() for k in m.model_fields]  # type: ignore[union-attr]
RAW = "@@RAW{}@@"


@st.composite
def job_spec_text(draw: st.DrawFn) -> str:
    """A job spec: a valid one with keys set to random or hazardous values, deleted or added, written as YAML or
    JSON, then mutated as text; or plain junk."""
    kind = draw(st.sampled_from(["mutated"] * 6 + ["junk", "hazard"]))
    if kind == "junk":
        return draw(st.text(max_size=200))
    if kind == "hazard":
        key = draw(st.sampled_from(SPEC_KEYS))
        return (
            f"model: x\n{key.split('.')[0]}: "
            + ("{" + key.split(".")[1] + ": " if "." in key else "")
            + draw(yaml_scalar_text)
            + ("}" if "." in key else "")
            + "\n"
        )
    doc = copy.deepcopy(draw(st.sampled_from(VALID_SPECS)))
    raws: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.one_of(st.sampled_from(SPEC_KEYS), st.text(max_size=10)))
        *parents, leaf = key.split(".") if key in SPEC_KEYS else [key]
        target = doc
        for p in parents:
            if not isinstance(target.get(p), dict):
                target[p] = {}
            target = target[p]
        op = draw(st.sampled_from(["delete", "value", "value", "raw", "raw"]))
        if op == "delete":
            target.pop(leaf, None)
        elif op == "value":
            target[leaf] = draw(plain_values)
        else:
            target[leaf] = RAW.format(len(raws))
            raws.append(draw(yaml_scalar_text))
    if draw(st.booleans()):
        text = yaml.safe_dump(doc, default_flow_style=draw(st.sampled_from([False, None, True])), allow_unicode=True)
    else:
        text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    for i, raw in enumerate(raws):
        for form in (f"'{RAW.format(i)}'", f'"{RAW.format(i)}"', RAW.format(i)):
            text = text.replace(form, raw)
    return draw(text_mutation(text))


@given(text=job_spec_text(), encoding=encodings)
@examples(200)
@example(text="model: " + deep(5000, "flow-list"), encoding="utf-8")  # bug 1: RecursionError
@example(text="model: x\nbatch_size: 1" + "0" * 5000, encoding="utf-8")  # bug 2: ValueError (int digits limit)
@example(text="model: x\nmodel_args: {a: !!binary /w==}", encoding="utf-8")  # bug 3: bytes kill model_dump
def test_job_spec_loads_or_refuses(base: Path, text: str, encoding: str) -> None:
    """``load_job_spec``: a JobSpec or a JobSpecError; a spec that loads can be written out as ``launch`` and
    ``train`` write it and reads back the same."""
    with workdir(base) as d:
        spec = returns_or_refuses(load_job_spec, write_text(d / "job.yaml", text, encoding))
        if spec is None:
            return
        dumped = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
        again = load_job_spec(write_text(d / "again.yaml", dumped))
        assert again.model_dump(mode="json") == spec.model_dump(mode="json")


# ---- `--input` specs --------------------------------------------------------------------------------------------

DIM = st.one_of(st.integers(-3, 10**13).map(str), st.sampled_from([*NUMBER_HAZARDS, "", " ", "1 ", "3.0", "²"]))


@st.composite
def input_spec_text(draw: st.DrawFn) -> str:
    """``[name=]dtype[d1,...][:high]`` with each part valid, near-valid or junk; or plain junk."""
    if draw(st.integers(0, 4)) == 0:
        return draw(hazard_text)
    name = draw(
        st.one_of(
            st.sampled_from(["", "", "x=", "input_ids=", "token_type_ids = ", "1x=", "a-b=", "é=", "="]),
            st.text(max_size=5).map(lambda s: s + "="),
        )
    )
    dtype = draw(
        st.sampled_from(
            [
                "float32",
                "float64",
                "float16",
                "bfloat16",
                "int64",
                "int32",
                "int8",
                "bool",
                "Float32",
                "float",
                "",
                " float32 ",
            ]
        )
    )
    dims = draw(st.lists(DIM, max_size=5))
    sep = draw(st.sampled_from([",", ", ", " ,", ";", ",,"]))
    highs = ["", "", ":10", ":0", ":2147483647", ":2147483648", ": 5", ":-1", ":x", ":" + "9" * 13]
    high = draw(st.one_of(st.sampled_from(highs), st.integers(-5, 2**40).map(lambda h: f":{h}")))
    return f"{name}{dtype}[{sep.join(dims)}]{high}"


@given(texts=st.lists(input_spec_text(), min_size=1, max_size=4))
@examples(300)
def test_input_specs_parse_or_refuse(texts: list[str]) -> None:
    """``parse_input_spec(s)``: specs or an InputSpecError; a parsed spec prints as text that parses back to it."""
    for text in texts:
        spec = returns_or_refuses(parse_input_spec, text)
        if spec is not None:
            assert parse_input_spec(str(spec)) == spec
            assert isinstance(spec.bytes_per_sample, int) and spec.bytes_per_sample > 0
    specs = returns_or_refuses(parse_input_specs, texts)
    if specs is not None:
        assert [s.name for s in specs if s.name] == list(dict.fromkeys(s.name for s in specs if s.name))


@given(spec=input_spec_text(), label=st.one_of(st.none(), input_spec_text()))
@examples(8)
def test_plan_input_and_label_options(base: Path, spec: str, label: str | None) -> None:
    """``plan --input X [--label Y]`` on a real probe: exit 0 or 2, no traceback (few examples: a probe is slow)."""
    with workdir(base) as d:
        cli(
            [
                "plan",
                "tinymodels:mlp",
                f"--input={spec}",
                "-b",
                "2",
                "--gpu",
                "T4",
                *([f"--label={label}"] if label is not None else []),
            ],
            d,
        )


# ---- `--model-arg` ----------------------------------------------------------------------------------------------

CONFIG_KEYS = list(TRANSFORMER_ARGS)
model_arg_value = st.one_of(
    st.integers(-5, 10**6).map(str),
    yaml_scalar_text,
    st.sampled_from(
        [
            "gelu",
            "swiglu",
            "rmsnorm",
            "layernorm",
            "learned",
            "none",
            "0.1",
            "1.0",
            "0",
            "1",
            "2",
            "8",
            "64",
            "true",
            "false",
        ]
    ),
)
model_arg = st.builds(
    lambda k, sep, v: f"{k}{sep}{v}",
    st.one_of(
        st.sampled_from(CONFIG_KEYS), st.sampled_from(["", " ", "a b", "hidden", "classes"]), st.text(max_size=8)
    ),
    st.sampled_from(["=", "=", "=", "", " = ", "=="]),
    model_arg_value,
)


@given(items=st.lists(model_arg, max_size=5), name=st.sampled_from([*TRANSFORMER_CONFIGS, "resnet18", "lenet"]))
@examples(200)
@example(items=["hidden_size=" + deep(5000, "flow-list")], name="bert-base")  # bug 4: RecursionError
@example(items=["hidden_size=1" + "0" * 5000], name="bert-base")  # bug 4: ValueError (int digits limit)
@example(items=["num_layers=100000000"], name="bert-base")  # bug 5: accepted, then builds 1e8 layers
def test_model_args_parse_or_refuse(items: list[str], name: str) -> None:
    """``parse_model_args`` then ``resolve_model``: keyword arguments and a model reference, or a PaddlefitError; a
    zoo transformer that resolves has a config within the bounds a plan can build (no 1e8-layer configs)."""
    args = returns_or_refuses(parse_model_args, items)
    if args is None:
        return
    ref = returns_or_refuses(resolve_model, name, args)
    if ref is not None and ref.transformer is not None:  # within the parallel planner's bounds (TransformerConfig)
        cfg = ref.transformer
        assert cfg.num_layers <= 1024 and cfg.hidden_size <= MIB and cfg.vocab_size <= 2**24, cfg
        assert cfg.ffn_size <= 2**22 and cfg.max_position <= 2**24 and cfg.type_vocab_size <= 2**16, cfg


TINY_BERT = [
    "vocab_size=50",
    "hidden_size=8",
    "num_heads=2",
    "ffn_size=8",
    "num_layers=1",
    "max_position=16",
    "default_seq_len=8",
]


@given(items=st.lists(model_arg, min_size=1, max_size=2), mlp=st.booleans())
@examples(12)
def test_plan_model_arg_options(base: Path, items: list[str], mlp: bool) -> None:
    """``plan --model-arg`` on a real probe, of a tiny user model or a tiny zoo transformer with one or two of its
    fields fuzzed: exit 0 or 2, no traceback."""
    model = (
        ["tinymodels:mlp", "--input", "float32[30]"] if mlp else ["bert-base", *(f"--model-arg={a}" for a in TINY_BERT)]
    )
    with workdir(base) as d:
        cli(["plan", *model, *(f"--model-arg={a}" for a in items), "-b", "2", "--gpu", "T4"], d)


# ---- CSV files: GPU catalog and prices --------------------------------------------------------------------------

GPUS_CSV = (CATALOG / "gpus.csv").read_text(encoding="utf-8")
PRICES_CSV = (CATALOG / "gpu_prices.csv").read_text(encoding="utf-8")
#: A number as text: powers of ten at the edges (1e300: a product with GiB or 1e12 overflows; 1e-320 is subnormal),
#: any float, any int, the hazards.
EXPONENTS = [-320, -308, -30, -12, -6, -1, 0, 1, 3, 6, 9, 12, 15, 18, 30, 100, 200, 290, 299, 300, 305, 307, 308, 309]
number_text = st.one_of(
    st.sampled_from(EXPONENTS).map(lambda e: f"1e{e}"),
    st.floats().map(repr),
    st.integers(-(10**12), 10**12).map(str),
    st.sampled_from(NUMBER_HAZARDS),
)
cell_value = st.one_of(number_text, number_text, st.sampled_from(TEXT_HAZARDS), st.text(max_size=12))


@st.composite
def mutated_csv(draw: st.DrawFn, shipped: str, header_names: list[str]) -> str:
    """A few rows of a shipped CSV: with numbers replaced (the structure kept: values a parser must bound), or with
    cells, columns and rows changed, written with random line ends and mutated as text; or plain junk."""
    mode = draw(st.sampled_from(["values", "values", "structure", "structure", "junk"]))
    if mode == "junk":
        return draw(st.text(max_size=300))
    rows = list(csv.reader(io.StringIO(shipped)))
    header, body = list(rows[0]), rows[1:]
    picked = draw(st.lists(st.sampled_from(body), min_size=1 if mode == "values" else 0, max_size=4))
    rows = [header] + [list(r) for r in picked]
    if mode == "values":
        for _ in range(draw(st.integers(1, 4))):
            r = draw(st.integers(1, len(rows) - 1))
            numeric = [c for c, v in enumerate(rows[r]) if re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?", v)]
            rows[r][draw(st.sampled_from(numeric))] = draw(number_text)
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        return buf.getvalue()
    for _ in range(draw(st.integers(0, 4))):
        op = draw(
            st.sampled_from(
                ["cell"] * 12
                + ["header", "drop_col", "dup_col", "extra", "short", "swap", "dup_row", "rename", "rename"]
            )
        )
        width = len(rows[0])
        if op == "cell" and len(rows) > 1:
            r = draw(st.integers(1, len(rows) - 1))
            if rows[r]:
                rows[r][draw(st.integers(0, len(rows[r]) - 1))] = draw(cell_value)
        elif op == "header" and width:
            rows[0][draw(st.integers(0, width - 1))] = draw(st.one_of(st.sampled_from(header_names), hazard_text))
        elif op == "drop_col" and width:
            c = draw(st.integers(0, width - 1))
            rows = [r[:c] + r[c + 1 :] for r in rows]
        elif op == "dup_col" and width:
            c = draw(st.integers(0, width - 1))
            rows = [r + r[c : c + 1] for r in rows]
        elif op == "extra":
            rows[draw(st.integers(0, len(rows) - 1))].append(draw(cell_value))
        elif op == "short":
            r = draw(st.integers(0, len(rows) - 1))
            rows[r] = rows[r][: draw(st.integers(0, len(rows[r])))]
        elif op == "swap" and width > 1:
            a, b = draw(st.integers(0, width - 1)), draw(st.integers(0, width - 1))
            for r in rows:
                if max(a, b) < len(r):
                    r[a], r[b] = r[b], r[a]
        elif op == "dup_row" and len(rows) > 1:
            rows.append(list(rows[draw(st.integers(1, len(rows) - 1))]))
        elif op == "rename" and len(rows) > 1:  # a new name, so the row adds to the catalog instead of replacing
            r = draw(st.integers(1, len(rows) - 1))
            if rows[r]:
                rows[r][0] = draw(st.sampled_from(["X1", "my-gpu", "T4", "a100"]))
    buf = io.StringIO()
    csv.writer(buf, lineterminator=draw(st.sampled_from(["\n", "\r\n"]))).writerows(rows)
    return draw(text_mutation(buf.getvalue()))


GPU_COLUMNS = [*next(csv.reader(io.StringIO(GPUS_CSV))), "mem_bw_gbps", "nvlink_gbps", "pcie_gbps", "sm_count"]
PRICE_COLUMNS = [*next(csv.reader(io.StringIO(PRICES_CSV))), "gpu"]


def csv_names(text: str) -> list[str]:
    """First-column values of ``text`` (candidate GPU names), for ``--gpu``."""
    try:
        return [r[0] for r in list(csv.reader(io.StringIO(text)))[1:] if r and r[0].strip()][:2]
    except csv.Error:
        return []


@given(text=mutated_csv(GPUS_CSV, GPU_COLUMNS), encoding=encodings)
@examples(300)
@example(text=GPUS_CSV.replace(",turing,7.5,16,", ",turing,7.5,1e300,", 1), encoding="utf-8")  # bug 7: OverflowError
@example(text=GPUS_CSV.replace(",turing,7.5,16,", ",turing,7.5,1e-320,", 1), encoding="utf-8")  # bug 7: 0 bytes
def test_gpu_catalog_loads_or_refuses(base: Path, text: str, encoding: str) -> None:
    """``load_gpus([FILE])``: GPUs or a CatalogError; a catalog that loads renders (``gpus --json``/``--csv``) and its
    CSV reads back to the same rows."""
    with workdir(base) as d:
        gpus = returns_or_refuses(load_gpus, [write_text(d / "gpus.csv", text, encoding)])
        if gpus is None:
            return
        docs = catalog_docs(gpus)
        assert all(d["capacity_bytes"] > 0 for d in docs)
        json.dumps(docs, allow_nan=False)
        assert load_gpus([write_text(d / "again.csv", catalog_csv(gpus))]) == gpus


@given(
    text=mutated_csv(GPUS_CSV, GPU_COLUMNS),
    view=st.sampled_from(["table", "--json", "--csv"]),
    planner=st.sampled_from(["probe", "parallel"]),
)
@examples(30)
def test_gpus_and_plan_with_a_catalog_file(base: Path, measured: None, text: str, view: str, planner: str) -> None:
    """``gpus --catalog`` and ``plan --catalog`` (probe and parallel planners, on the file's first GPUs): exit 0 or
    2, no traceback."""
    with workdir(base) as d:
        write_text(d / "gpus.csv", text)
        cli(["gpus", "--catalog", "gpus.csv", *([view] if view != "table" else [])], d)
        gpu = [f"--gpu={n}" for n in csv_names(text)] or ["--gpu=T4"]
        if planner == "probe":
            cli(["plan", *MLP, "--catalog", "gpus.csv", *gpu], d)
        else:
            cli(["plan", "llama-2-7b", "--gpus", "8", "--catalog", "gpus.csv", *gpu, "--json"], d)


@given(text=mutated_csv(PRICES_CSV, PRICE_COLUMNS), encoding=encodings)
@examples(300)
@example(text=PRICES_CSV.replace("\n", "\r"), encoding="utf-8")  # bug 6: csv.Error (lone CR line ends)
@example(text="x" * 200_000 + "\n", encoding="utf-8")  # bug 6: csv.Error (header field over the csv limit)
def test_price_csv_parses_or_refuses(base: Path, text: str, encoding: str) -> None:
    """``parse_price_csv`` through ``load_prices([FILE])``: rows or a CatalogError; rows have finite prices."""
    from paddlefit.catalog.prices import load_prices

    with workdir(base) as d:
        rows = returns_or_refuses(load_prices, [str(write_text(d / "prices.csv", text, encoding))])
        if rows is None:
            return
        for r in rows:
            assert r.gpu_count >= 1 and r.on_demand_usd_per_hour >= 0 and r.instance_type and r.cloud
    returns_or_refuses(parse_price_csv, text, "fuzz.csv")


@given(text=mutated_csv(PRICES_CSV, PRICE_COLUMNS), spot=st.booleans(), gpu=st.sampled_from([[], ["--gpu=T4"]]))
@examples(30)
def test_cost_with_a_price_file(base: Path, measured: None, text: str, spot: bool, gpu: list[str]) -> None:
    """``cost --prices FILE`` (the probe memoised): exit 0 or 2, no traceback."""
    with workdir(base) as d:
        write_text(d / "prices.csv", text)
        cli(
            [
                "cost",
                *MLP,
                "--dataset-size",
                "1000",
                "--epochs",
                "1",
                "--shipped-prices",
                "--prices",
                "prices.csv",
                *gpu,
                *(["--spot"] if spot else []),
                "--json",
            ],
            d,
        )


# ---- calibration files ------------------------------------------------------------------------------------------

#: The file `paddlefit calibrate -m lenet -b 2 -b 4` wrote on this project's CPU machine, and the same rows as a
#: GPU's (peak FLOP/s, efficiency class and the per-operator parameters as `calibrate` writes them on a GPU).
CAL_CPU = json.loads((DATA / "calibration-cpu.json").read_text(encoding="utf-8"))
CAL_GPU = {
    **copy.deepcopy(CAL_CPU),
    "device": "T4",
    "device_name": "Tesla T4",
    "cuda_context_bytes": 300 * MIB,
    "rows": [{**r, "peak_flops": 8.1e12, "efficiency_class": "fp32"} for r in CAL_CPU["rows"]],
    "perf_params": {
        k: v
        for k, v in json.loads((CATALOG / "gpu_perf_params.json").read_text()).items()
        if k in ("values", "provenance")
    },
}


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON document (keys and list indexes)."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


def get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


#: A JSON number: powers of ten at the edges (floats, and ints up to 10^400), any int, any float.
json_number = st.one_of(
    st.sampled_from(EXPONENTS).map(lambda e: float(f"1e{e}")),
    st.sampled_from([12, 18, 30, 100, 300, 308, 309, 400]).map(lambda e: 10**e),
    st.integers(-(10**20), 10**20),
    st.floats(),
)


@st.composite
def mutated_json(draw: st.DrawFn, bases: list[dict]) -> str:
    """A document with numbers replaced (the structure kept: values a parser must bound), or with values replaced
    (huge ints, NaN, wrong types), deleted or added, written as JSON and mutated as text; or plain junk."""
    mode = draw(st.sampled_from(["numbers", "numbers", "values", "values", "junk"]))
    if mode == "junk":
        return draw(st.one_of(st.text(max_size=200), deep_values.map(lambda s: s.replace("a: ", '"a": '))))
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    if mode == "numbers":
        leaves = [
            p for p in paths(doc) if p and isinstance(get(doc, p), int | float) and not isinstance(get(doc, p), bool)
        ]
        shared = draw(json_number)  # one magnitude for several numbers: products of them overflow
        for path in draw(st.lists(st.sampled_from(leaves), min_size=1, max_size=6)) if leaves else []:
            get(doc, path[:-1])[path[-1]] = shared if draw(st.booleans()) else draw(json_number)
        return json.dumps(doc)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from([p for p in paths(doc) if p]))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["set", "set", "set", "delete", "add"]))
        if op == "set":
            parent[path[-1]] = draw(plain_values)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(plain_values)
        else:
            parent.append(draw(plain_values))
    return draw(text_mutation(json.dumps(doc, indent=draw(st.sampled_from([None, 1])))))


@given(text=mutated_json([CAL_CPU, CAL_GPU]), encoding=encodings)
@examples(200)
@example(
    text=json.dumps(
        {**CAL_GPU, "rows": [{**CAL_GPU["rows"][0], "train_flops_per_sample": 10**300, "batch_size": 10**10}]}
    ),
    encoding="utf-8",
)  # bug 8: OverflowError
def test_calibration_loads_or_refuses(base: Path, text: str, encoding: str) -> None:
    """``load_calibrations([FILE])``: calibrations or a CatalogError; what loads has finite corrections."""
    import math

    with workdir(base) as d:
        cals = returns_or_refuses(load_calibrations, [write_text(d / "cal.json", text, encoding)])
        for cal in (cals or {}).values():
            assert math.isfinite(cal.memory_ratio) and all(math.isfinite(v) for v in cal.efficiency.values())


@given(text=mutated_json([CAL_CPU, CAL_GPU]), command=st.sampled_from(["plan", "cost"]))
@examples(30)
def test_plan_and_cost_with_a_calibration_file(base: Path, measured: None, text: str, command: str) -> None:
    """``plan``/``cost --calibration FILE`` (the probe memoised): exit 0 or 2, no traceback."""
    with workdir(base) as d:
        write_text(d / "cal.json", text)
        length = ["--dataset-size", "1000", "--epochs", "1", "--shipped-prices"] if command == "cost" else []
        cli([command, *MLP, "--gpu", "T4", "--calibration", "cal.json", *length, "--json"], d)


# ---- LLM model configs (`plan CONFIG.json|yaml --gpus N`) -----------------------------------------------------

LLM_DOCS = [
    {
        "model_type": "qwen2",
        "hidden_act": "silu",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
    },
    {
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "vocab_size": 50257,
        "n_positions": 1024,
    },
    {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000},
]


@st.composite
def llm_config_file(draw: st.DrawFn) -> tuple[str, str]:
    """(suffix, text): a config as JSON (mutated as JSON documents are) or as YAML (with the YAML hazards)."""
    if draw(st.booleans()):
        return ".json", draw(mutated_json(LLM_DOCS))
    doc = copy.deepcopy(draw(st.sampled_from(LLM_DOCS)))
    key = draw(st.sampled_from(sorted(doc)))
    text = yaml.safe_dump({**doc, key: RAW.format(0)}).replace(f"'{RAW.format(0)}'", draw(yaml_scalar_text))
    return ".yaml", draw(text_mutation(text))


@given(file=llm_config_file())
@examples(150)
@example(file=(".json", '{"hidden_size": 1' + "0" * 5000 + "}"))  # bug 9: ValueError (int digits limit)
def test_llm_config_loads_or_refuses(base: Path, file: tuple[str, str]) -> None:
    """``load_llm_config``: a config or a ModelError."""
    from paddlefit.catalog.transformer_configs import load_llm_config

    with workdir(base) as d:
        cfg = returns_or_refuses(load_llm_config, write_text(d / f"config{file[0]}", file[1]))
        if cfg is not None:
            assert cfg.params > 0


@given(file=llm_config_file())
@examples(25)
def test_parallel_plan_of_a_config_file(base: Path, file: tuple[str, str]) -> None:
    """``plan CONFIG --gpus 8``: exit 0 or 2, no traceback."""
    with workdir(base) as d:
        write_text(d / f"config{file[0]}", file[1])
        cli(["plan", f"config{file[0]}", "--gpus", "8", "--gpu", "A100-SXM4-80GB", "--json"], d)


# ---- doctor snapshots (`doctor --from`, `launch --from-snapshot`) -----------------------------------------------

SNAPSHOTS = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((DATA / "snapshots").glob("*.json"))]
for _s in SNAPSHOTS:  # keep the documents small: mutations then hit every key, not mostly flag names
    _s["paddle_flags"] = _s.get("paddle_flags", [])[:20]


@given(text=mutated_json(SNAPSHOTS), encoding=encodings)
@examples(150)
@example(text=json.dumps({**SNAPSHOTS[0], "gpus": True}), encoding="utf-8")  # bug 10: TypeError
def test_snapshot_loads_or_refuses(base: Path, text: str, encoding: str) -> None:
    """``load_snapshot`` then every check (what ``doctor --from`` does): findings or a PaddlefitError."""
    from paddlefit.diagnose import load_snapshot, run_checks

    with workdir(base) as d:
        snap = returns_or_refuses(load_snapshot, write_text(d / "snap.json", text, encoding))
        if snap is not None:
            returns_or_refuses(run_checks, snap)


@given(text=mutated_json(SNAPSHOTS), json_out=st.booleans())
@examples(25)
def test_doctor_from_a_snapshot_file(base: Path, text: str, json_out: bool) -> None:
    """``doctor --from FILE``: exit 0, 1 (a check found an error: the documented code) or 2, no traceback."""
    with workdir(base) as d:
        write_text(d / "snap.json", text)
        with chdir(d):
            r = RUNNER.invoke(
                app,
                ["doctor", "--from", "snap.json", *(["--json"] if json_out else [])],
                env={"PADDLEFIT_DEBUG": None, "COLUMNS": "200"},
            )
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise AssertionError(f"doctor raised {r.exception!r}") from r.exception
        assert r.exit_code in (0, 1, 2) and "Traceback" not in r.output, r.output[-2000:]
        if json_out and r.exit_code != 2:
            json.loads(r.stdout)


# ---- `launch` options -------------------------------------------------------------------------------------------


def opt(values: list[str], junk_one_in: int = 6) -> st.SearchStrategy[str]:
    """An option value: junk one time in ``junk_one_in``, else near-valid (``values``)."""
    return one_in(junk_one_in, hazard_text, st.sampled_from(values))


LAUNCH_OPTIONS = {
    "--nodes": opt(["1", "2", "3", "0", "1024", "1025", "-1"], junk_one_in=20),
    "--gpus-per-node": opt(["0", "1", "8", "64", "65", "-1"], junk_one_in=20),
    "--name": opt(["job-1", "a", "Bad_Name", "-job", "x" * 43]),
    "--master": opt(["10.0.0.1:8090", "[::1]:80", "host:0", "host:65536", "host", "a.b.c:1", "-h:1"]),
    "--hosts": opt(["a,b", "u@a,u@b", "a", "a,,b", "-oProxy=x,b", "a:22,b", "a,b,c"]),
    "--port": opt(["8090", "1", "65535", "0", "65536", "-1"], junk_one_in=20),
    "--workdir": opt(["/work/job", "job", "/tmp/a b"]),
    "--run-dir": opt(["runs/x", "/shared/runs/x", "runs/x y"]),
    "--gpu": opt(["L4", "A100", "A100-SXM4-80GB", "T4", "H900", "a100"]),
    "--bucket": opt(["s3://my-bucket/ckpt", "gs://bb1/p", "my-bucket", "s3://B/x"]),
    "--cloud": opt(["aws", "gcp", "azure", "lambda", "mars"]),
    "--setup": opt(["pip install -r requirements.txt", "pip install a\npip install b", "true"]),
    "--image": opt(["registry/me/ocr:1", "paddle:3", "-x", "a b"]),
    "--pvc": opt(["my-pvc", "ckpt.v1", "My_PVC!"]),
    "--shm-gib": opt(["8", "1", "4096", "0", "4097"], junk_one_in=20),
    "--nccl-ifname": opt(["eth0", "^lo,docker", "=eth0", "eth0 eth1"]),
}
FLAGS = ["--spot", "--no-ib", "--json"]
#: What may already be at `--out` (and in it) when `launch` runs.
OUT_STATES = [
    "absent",
    "nested",
    "empty-dir",
    "file",
    "symlink-dir",
    "dangling-symlink",
    "old-files",
    "dir-named-file",
    "symlink-named-file",
    "fifo-named-file",
    "fifo",
]
TARGET_FILES = ["launch-node0.sh", "launch-ssh.sh", "job.yaml", "task.yaml", "paddlejob.yaml"]


#: Options every target takes, and the options only some do (a stray one must be refused).
COMMON_OPTIONS = ["--nodes", "--gpus-per-node", "--name", "--nccl-ifname"]
TARGET_ONLY = {
    "local": ["--master", "--run-dir"],
    "ssh": ["--hosts", "--workdir", "--run-dir", "--port"],
    "skypilot": ["--gpu", "--bucket", "--cloud", "--setup", "--image", "--port"],
    "kubeflow": ["--image", "--pvc", "--shm-gib"],
}
NEEDS = {"local": "--master", "ssh": "--hosts", "skypilot": "--gpu"}


@st.composite
def launch_args(draw: st.DrawFn) -> list[str]:
    """``launch`` options: a target (junk one time in ten), what it needs (mostly), some of its own and the common
    options, sometimes a stray option of another target; values near-valid or junk, as ``--opt=value`` or
    ``--opt value``."""
    target = draw(opt(list(TARGET_ONLY), junk_one_in=10))
    own = TARGET_ONLY.get(target, [])
    names = draw(st.lists(st.sampled_from(COMMON_OPTIONS + own * 2), max_size=5, unique=True))
    if target in NEEDS and NEEDS[target] not in names and draw(st.integers(0, 4)):
        names.append(NEEDS[target])
    if draw(st.integers(0, 6)) == 0:
        names.append(draw(st.sampled_from(sorted(LAUNCH_OPTIONS))))
    args = [f"--target={target}"]
    for name in dict.fromkeys(names):
        value = draw(LAUNCH_OPTIONS[name])
        args += [f"{name}={value}"] if draw(st.booleans()) else [name, value]
    return args + draw(st.lists(st.sampled_from(FLAGS), max_size=2, unique=True))


def make_out(d: Path, state: str, name: str) -> Path:
    """Put ``state`` at ``d/out`` (``name``: a file the target writes)."""
    out = d / "out"
    if state == "nested":
        return d / "a" / "b" / "out"
    if state == "file":
        out.write_text("not a directory\n")
    elif state == "symlink-dir":
        (d / "real").mkdir()
        out.symlink_to(d / "real")
    elif state == "dangling-symlink":
        out.symlink_to(d / "missing")
    elif state == "fifo":
        os.mkfifo(out)
    elif state != "absent":
        out.mkdir()
        if state == "old-files":
            (out / name).write_text("# an older launch\n")
        elif state == "dir-named-file":
            (out / name).mkdir()
        elif state == "symlink-named-file":
            (d / "elsewhere").write_text("keep me\n")
            (out / name).symlink_to(d / "elsewhere")
        elif state == "fifo-named-file":
            os.mkfifo(out / name)
    return out


def check_written(d: Path, files: list[str]) -> None:
    """Every file ``launch`` wrote is complete: YAML parses (a SkyPilot task validates), a script passes
    ``bash -n``, and the job spec each node reads back (``job.yaml``, a heredoc) loads."""
    for rel in files:
        path = d / rel
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".sh":
            r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert r.returncode == 0, f"{rel}: {r.stderr}"
        elif path.suffix == ".yaml":
            doc = yaml.safe_load(text)
            if path.name == "task.yaml":
                assert validate_skypilot_task(doc) == []
            if path.name == "job.yaml":
                load_job_spec(path)
        for spec in re.findall(rf"<<'{SPEC_DELIMITER}'\n(.*?)\n{SPEC_DELIMITER}\n", text, re.S):
            load_job_spec(write_text(d / ".spec-from-heredoc.yaml", spec))
            (d / ".spec-from-heredoc.yaml").unlink()


@given(
    args=launch_args(),
    spec=one_in(5, job_spec_text(), st.just(LAUNCHABLE)),
    state=one_in(2, st.sampled_from(OUT_STATES), st.sampled_from(["absent", "nested", "empty-dir", "old-files"])),
    name=st.sampled_from(TARGET_FILES),
    snapshot=one_in(4, mutated_json(SNAPSHOTS), st.none()),
)
@examples(100)
def test_launch_writes_all_or_nothing(
    base: Path, args: list[str], spec: str, state: str, name: str, snapshot: str | None
) -> None:
    """``launch SPEC --out DIR ...``: exit 0 or 2, no traceback; exit 2 leaves the directory as it was; exit 0 writes
    complete files and no temp file."""
    with workdir(base) as d:
        write_text(d / "job.yaml", spec)
        out = make_out(d, state, name)
        extra = []
        if snapshot is not None:
            write_text(d / "snap.json", snapshot)
            extra = ["--from-snapshot", "snap.json"]
        before = tree(d)
        r = cli(["launch", "job.yaml", *args, *extra, "--out", str(out.relative_to(d))], d)
        files = written(before, tree(d), r.exit_code)
        if r.exit_code == 0:
            assert files, "launch exited 0 and wrote nothing"
            check_written(d, files)
            if "--json" in args:
                assert sorted(json.loads(r.stdout)["files"]) == sorted(files)


# ---- what the fuzzing found: each input once more, with the message it gets now (docs/errors.md) ---------------


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model: " + deep(5000, "flow-list"), "nests lists/mappings more than 32 levels deep (line 1)"),  # bug 1
        (
            "model: x\nmodel_args:\n" + "".join(f"{'  ' * i}a{i}:\n" for i in range(40)) + "  " * 40 + "1\n",
            "more than 32 levels deep",
        ),  # bug 1, block style
        ("model: x\nbatch_size: 1" + "0" * 5000, "an integer too long to read"),  # bug 2
        ("model: x\nmodel_args: {a: !!binary /w==}", "line 2, column 17: `!!binary` is not plain data"),  # bug 3
        ("model: x\nmodel_args: {a: !!set {b}}", "`!!set` is not plain data"),  # bug 3
    ],
)
def test_found_job_specs_are_refused_naming_the_problem(base: Path, text: str, needle: str) -> None:
    """Bugs 1-3: a traceback (RecursionError, ValueError) or, for `!!binary`, a spec that loaded and then broke
    ``launch``'s write-back (UnicodeDecodeError in ``model_dump``); now exit 2 naming the file and the fix, and
    ``launch`` writes nothing."""
    with workdir(base) as d:
        write_text(d / "job.yaml", text)
        before = tree(d)
        r = cli(["launch", "job.yaml", "-t", "local", "--out", "out"], d)
        assert r.exit_code == 2 and needle in " ".join(r.stderr.split()) and "job.yaml" in r.stderr, r.stderr
        written(before, tree(d), 2)


def test_found_dates_are_read_as_text_and_launch_writes_them_back(base: Path) -> None:
    """Bug 3's other half: a date in ``model_args`` was a ``datetime.date`` locally and the string ``launch`` wrote
    for the nodes; now it is the same string everywhere."""
    with workdir(base) as d:
        write_text(d / "job.yaml", LAUNCHABLE + "model_args: {day: 2024-01-31}\n")
        assert load_job_spec(d / "job.yaml").model_args == {"day": "2024-01-31"}
        assert cli(["launch", "job.yaml", "-t", "kubeflow", "--out", "out"], d).exit_code == 0
        check_written(d, ["out/paddlejob.yaml"])


@pytest.mark.parametrize(
    ("arg", "needle"),
    [
        (
            "hidden_size=" + "[" * 3000,
            "`--model-arg hidden_size=...`: the value nests lists/mappings more than 32",
        ),  # 4
        ("hidden_size=1" + "0" * 5000, "`--model-arg hidden_size=...`: the value has an integer too long"),  # bug 4
        (
            "num_layers=100000000",
            "`--model-arg num_layers=100000000` for bert-base: must be an integer >= 1 and <= 1,024",
        ),
    ],
)
def test_found_model_args_are_refused_naming_the_option(base: Path, arg: str, needle: str) -> None:
    """Bugs 4-5: a traceback, or (10^8 layers) a plan that built layers until memory ran out; now exit 2 at once."""
    with workdir(base) as d:
        r = cli(["plan", "bert-base", f"--model-arg={arg}", "--gpu", "T4"], d)
        assert r.exit_code == 2 and needle in " ".join(r.stderr.split()), r.stderr


def test_found_price_files_with_cr_line_ends_parse(base: Path, measured: None) -> None:
    """Bug 6: a price CSV with old-Mac line ends (``\\r`` alone) or a header field over the csv module's limit was a
    csv.Error traceback; the first now reads as the same rows, the second is refused naming line 1. The SkyPilot
    cache reader shares the header reader."""
    from paddlefit.catalog.skypilot import parse_skypilot_vms

    assert parse_price_csv(PRICES_CSV.replace("\n", "\r"), "cr.csv") == parse_price_csv(PRICES_CSV, "cr.csv")
    with pytest.raises(PaddlefitError, match="line 1: field larger than field limit"):
        parse_price_csv("x" * 200_000 + "\n", "big.csv")
    with pytest.raises(PaddlefitError, match=r"SkyPilot catalog `vms\.csv`, line 1: field larger"):
        parse_skypilot_vms("x" * 200_000 + "\n", "aws", "vms.csv")
    with workdir(base) as d:
        write_text(
            d / "p.csv",
            "cloud,instance_type,accelerator,accelerator_count,vcpus,memory_gib,price_usd_per_hour,"
            "spot_usd_per_hour,region\rmine,box,T4,1,4,16,0.5,,us-east-1\r",
        )
        r = cli(
            [
                "cost",
                *MLP,
                "--dataset-size",
                "1000",
                "--epochs",
                "1",
                "--shipped-prices",
                "--prices",
                "p.csv",
                "--cloud",
                "mine",
                "--json",
            ],
            d,
        )
        assert r.exit_code == 0 and "box" in r.stdout, r.output


@pytest.mark.parametrize(
    ("memory", "needle"), [("1e300", "less than or equal to 1048576"), ("1e-320", "greater than or equal to 0.0625")]
)
def test_found_gpu_rows_out_of_range_are_refused_naming_the_field(base: Path, memory: str, needle: str) -> None:
    """Bug 7: ``memory_gib`` 1e300 was an OverflowError in ``gpus --json`` and ``plan``; 1e-320 a GPU of 0 bytes."""
    with workdir(base) as d:
        write_text(d / "g.csv", GPUS_CSV.replace(",turing,7.5,16,", f",turing,7.5,{memory},", 1))
        r = cli(["gpus", "--catalog", "g.csv", "--json"], d)
        assert r.exit_code == 2 and "line 2 (T4), field `memory_gib`" in r.stderr and needle in r.stderr, r.stderr


def test_found_calibration_with_huge_integers_is_refused(base: Path) -> None:
    """Bug 8: JSON integers whose product (train_flops_per_sample x batch_size) exceeds a float were an
    OverflowError; now the row is refused by number."""
    with workdir(base) as d:
        row = {**CAL_GPU["rows"][0], "train_flops_per_sample": 10**300, "batch_size": 10**10}
        write_text(d / "cal.json", json.dumps({**CAL_GPU, "rows": [row]}))
        r = cli(["plan", *MLP, "--gpu", "T4", "--calibration", "cal.json"], d)
        assert r.exit_code == 2 and "Calibration `cal.json`, row 0" in r.stderr and "not a measurement" in r.stderr


def test_found_llm_config_with_a_huge_integer_is_refused(base: Path) -> None:
    """Bug 9: a config.json integer over 4300 digits was a ValueError traceback (only JSONDecodeError was caught)."""
    with workdir(base) as d:
        write_text(d / "config.json", '{"hidden_size": 1' + "0" * 5000 + ', "num_hidden_layers": 2}')
        r = cli(["plan", "config.json", "--gpus", "8"], d)
        assert r.exit_code == 2 and "Model config config.json: not valid JSON: an integer too long" in r.stderr


@pytest.mark.parametrize("value", [True, 5, 1.5])
def test_found_snapshot_with_gpus_not_a_list_is_refused(base: Path, value: Any) -> None:
    """Bug 10 (found by the long soak): a snapshot whose ``gpus`` (or ``net``) is ``true`` or a number was a
    TypeError traceback in ``doctor --from`` and ``launch --from-snapshot``; now exit 2 naming the key."""
    with workdir(base) as d:
        write_text(d / "snap.json", json.dumps({**SNAPSHOTS[0], "gpus": value}))
        r = cli(["doctor", "--from", "snap.json"], d)
        assert r.exit_code == 2 and "is not a paddlefit snapshot: `gpus` must be a list" in r.stderr, r.stderr
