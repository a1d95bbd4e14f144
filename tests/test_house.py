"""The rules of the house (docs/architecture.md), checked on the source: a core free of the CLI's libraries, no
module reaching into another's private names, no package cycle, and a README that is a front door."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "paddlefit"
CORE = (
    "catalog",
    "estimate",
    "models",
    "plan",
    "train",
    "diagnose",
    "profiling",
    "tune",
    "deploy",
    "llm",
    "runs",
    "serving",
    "cost",
    "calibrate",
    "examples",
    "report",
    "jobspec",
    "rundir",
    "process",
    "probe",
)


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_the_core_imports_neither_typer_nor_rich() -> None:
    found = []
    for pkg in CORE:
        for path in (PKG / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                found += [
                    f"{path.relative_to(PKG)}:{node.lineno} {n}" for n in names if n.split(".")[0] in ("typer", "rich")
                ]
    assert found == []


def _private_names() -> dict[str, set[str]]:
    """Module path -> the ``_names`` it defines (functions, classes, methods, module-level assignments)."""
    out: dict[str, set[str]] = {}
    for path in _modules():
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        out[str(path)] = {n for n in names if n.startswith("_") and not n.startswith("__")}
    return out


def test_no_module_uses_another_modules_private_names() -> None:
    defined = _private_names()
    elsewhere: dict[str, set[str]] = {}
    for path, names in defined.items():
        for n in names:
            elsewhere.setdefault(n, set()).add(path)
    found = []
    for path in _modules():
        mine = defined[str(path)]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("paddlefit"):
                found += [
                    f"{path.relative_to(PKG)}:{node.lineno} from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if node.attr in elsewhere and node.attr not in mine:
                    found.append(f"{path.relative_to(PKG)}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_readme_is_a_front_door_linking_every_command() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) < 220
    block = re.findall(r"```(?:\w+)?\n(.*?)```", text, flags=re.S)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"], commands
    import typer.main

    from paddlefit.cli.main import app

    verbs = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert len(verbs) >= 10
    for verb in verbs:
        assert f"docs/commands/{verb}.md" in text, verb
        assert (ROOT / "docs" / "commands" / f"{verb}.md").is_file(), verb


# ---- docstring cross-references (:func:`...`, :class:`...`, :mod:`...`) resolve to names that exist ----------
_ROLE = re.compile(r":(?:py:)?(func|class|meth|mod|data|attr|exc|obj):`([^`]+)`")
_EXTERNAL = ("paddle", "numpy", "np", "typer", "rich", "pydantic", "psutil", "pynvml", "json", "os", "subprocess")


def _modname(p: Path) -> str:
    parts = p.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


_TREES = {_modname(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PKG.rglob("*.py"))}


def _members(node: ast.AST) -> dict[str, ast.AST]:
    """Names a module or class body defines (defs, classes, assignments, ``self.x =`` in a class's methods)."""
    out: dict[str, ast.AST] = {}
    for n in getattr(node, "body", []):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[n.name] = n
        elif isinstance(n, ast.Assign | ast.AnnAssign):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                out |= {e.id: n for e in ast.walk(t) if isinstance(e, ast.Name)}
        elif isinstance(n, ast.If | ast.Try):
            out |= _members(ast.Module(body=n.body + n.orelse, type_ignores=[]))
    if isinstance(node, ast.ClassDef):
        out |= {a.attr: a for a in ast.walk(node) if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store)}
    return out


def _imported(mod: str) -> dict[str, str]:
    """Name -> dotted origin of what ``mod`` imports (absolute imports: the house style)."""
    out = {}
    for n in ast.walk(_TREES[mod]):
        if isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out |= {a.asname or a.name: f"{n.module}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            out |= {(a.asname or a.name).split(".")[0]: a.name.split(".")[0] for a in n.names}
    return out


def _resolves(target: str, mod: str | None = None, depth: int = 0) -> bool:
    """Whether ``target`` names something: absolute (``paddlefit.x.y.Name.attr``) or relative to ``mod``."""
    parts = target.split(".")
    if mod is None:
        mods = [".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in _TREES]
        return bool(mods) and _resolves(".".join(parts[len(mods[0].split(".")) :]), mods[0], depth)
    if not target:
        return True
    node: ast.AST = _TREES[mod]
    if parts[0] not in _members(node):
        origin = _imported(mod).get(parts[0])
        if origin is None or depth > 5:
            return False
        return not origin.startswith("paddlefit") or _resolves(".".join([origin, *parts[1:]]), None, depth + 1)
    for p in parts:
        members = _members(node)
        if p not in members:
            return isinstance(node, ast.ClassDef) and bool(node.bases)  # inherited
        node = members[p]
    return True


def test_docstring_cross_references_resolve() -> None:
    assert _resolves("paddlefit.plan.planner.build_plan") and not _resolves("paddlefit.plan.planner.no_such_name")
    found = []
    for mod, tree in _TREES.items():
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for n in ast.walk(tree):
            doc = (
                ast.get_docstring(n, clean=False)
                if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                else None
            )
            for role, text in _ROLE.findall(doc or ""):
                t = (text[text.index("<") + 1 : -1] if text.endswith(">") else text).strip().lstrip("~!").rstrip("()")
                cls = n if isinstance(n, ast.ClassDef) else parents.get(n)
                if t.split(".")[0] in _EXTERNAL or (isinstance(cls, ast.ClassDef) and t.split(".")[0] in _members(cls)):
                    continue
                ok = (
                    (mod + t) in _TREES
                    if role == "mod" and t.startswith(".")
                    else _resolves(t)
                    if t.startswith("paddlefit")
                    else _resolves(t, mod)
                )
                found += [] if ok else [f"{mod}:{getattr(n, 'lineno', 1)} :{role}:`{text}`"]
    assert found == []


# ---- no import cycle between packages (imports inside functions included) --------------------------------------
def _package_imports() -> dict[str, set[str]]:
    """Package -> the paddlefit packages its modules import (module level or inside functions); top-level modules
    (``paddlefit/errors.py``...) are leaves and left out."""
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    edges: dict[str, set[str]] = {p: set() for p in packages}
    for pkg in packages:
        for path in (PKG / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
                edges[pkg] |= {n.split(".")[1] for n in names if n.startswith("paddlefit.")} & packages - {pkg}
    return edges


def test_no_import_cycle_between_packages() -> None:
    edges = _package_imports()

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            for n in edges[todo.pop()] - seen:
                seen.add(n)
                todo.append(n)
        return b in seen

    cycles = {frozenset({a, b}) for a in edges for b in edges[a] if reaches(b, a)}
    assert cycles == set(), "an import that closes a cycle: move the shared code down a layer"


def _imported_names(node: ast.AST) -> list[str]:
    """Module names an import statement or an ``importlib.import_module("...")`` call names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    fn = getattr(node, "func", None)
    if (
        isinstance(node, ast.Call)
        and getattr(fn, "attr", getattr(fn, "id", "")) == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return [str(node.args[0].value)]
    return []


def test_estimate_is_arithmetic_that_never_imports_paddle() -> None:
    # what runs Paddle to measure a model lives in probe/ (beside models/); estimate/ turns data into predictions
    found = [
        f"{path.name}:{node.lineno} {n}"
        for path in (PKG / "estimate").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for n in _imported_names(node)
        if n.split(".")[0] == "paddle" or n.startswith(("paddlefit.probe", "paddlefit.models"))
    ]
    assert found == []


def test_byte_multiples_are_written_only_in_the_units_module() -> None:
    """KiB/MiB/GiB/TiB come from :mod:`paddlefit.units`; no other module spells ``1024**3`` (code, not prose)."""
    found = []
    for path in _modules():
        if path == PKG / "units.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Pow)
                and isinstance(node.left, ast.Constant)
                and node.left.value == 1024
                and isinstance(node.right, ast.Constant)
                and node.right.value in (2, 3, 4)
            ):
                found.append(f"{path.relative_to(PKG)}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_comments_say_why_not_which_issue_changed_the_code() -> None:
    """No "issue 26" or "round 2" in the package or its tests: a comment says why the code is as it is. A public
    project's issue (``NVIDIA/TensorRT issue 1090``) is a source, and is named with its repository."""
    history = re.compile(r"(?:([\w.-]+/[\w.-]+) )?\b(?:issue|round) \d+\b", re.IGNORECASE)
    found = []
    for path in sorted([*PKG.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(not m.group(1) for m in history.finditer(line)) and path.name != "test_house.py":
                found.append(f"{path.relative_to(ROOT)}:{n}")
    assert found == []


def test_report_reads_runs_through_the_run_directory_modules_never_through_train() -> None:
    """``report`` reads a run as ``runs`` and ``export`` do: through :mod:`paddlefit.rundir.files` and
    :mod:`paddlefit.rundir.layout`, never through the trainer's modules."""
    found = []
    for path in sorted((PKG / "report").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.relative_to(PKG)}:{node.lineno} {n}" for n in names if n.startswith("paddlefit.train")]
    assert found == []
