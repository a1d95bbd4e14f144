"""The rules of the house (docs/architecture.md), checked on the source: module size, a core free of the CLI's
libraries, no module reaching into another's private names, and a README that is a front door."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "paddlefit"
CORE = ("catalog", "estimate", "models", "plan", "train", "diagnose", "tune", "deploy", "llm", "runs")
MAX_LINES = 450


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_no_module_is_over_the_limit() -> None:
    sizes = {str(p.relative_to(PKG)): len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}
    assert {k: v for k, v in sizes.items() if v > MAX_LINES} == {}


def test_the_core_imports_neither_typer_nor_rich() -> None:
    found = []
    for pkg in CORE:
        for path in (PKG / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []  # fmt: skip
                found += [f"{path.relative_to(PKG)}:{node.lineno} {n}" for n in names
                          if n.split(".")[0] in ("typer", "rich")]  # fmt: skip
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
                found += [f"{path.relative_to(PKG)}:{node.lineno} from {node.module} import {a.name}"
                          for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]  # fmt: skip
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
