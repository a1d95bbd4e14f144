"""Run the benchmarks and write their latest results to docs/benchmarks.md (`make bench`).

Each bench script runs as its own subprocess; its output is streamed here as it comes and kept. docs/benchmarks.md
then gets, per bench, a generated block between ``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->``:
the script's docstring's first sentence, the date and the machine (CPU model, cores, RAM, Paddle version, GPU),
the command, its exit code and wall time, and the output in a code block (without warnings raised in installed
packages, paths relative to the repository: :func:`clean_output`). Text outside the blocks (what each
bench measures, notes on a result) is kept; a bench without a block yet gets one at the end. The file is written
atomically (temp file, fsync, rename) after the runs, also when one fails.

    python bench/run_all.py                       # every bench in BENCHES, in order (about 20 minutes on 2 cores)
    python bench/run_all.py --only plan_speed     # a subset; the other blocks stay as they are

Exit code: 0 when every bench that ran exited 0 (met its target), else 1.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from paddlefit.units import GIB

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"

#: The benches `make bench` runs, in this order (cheap and self-contained first).
BENCHES = [
    "memory_accuracy",
    "plan_speed",
    "llm_plan",
    "collectives",
    "gpu_kernels",
    "gpu_fit",
    "plan_determinism",
    "trainer_overhead",
    "kill_soak",
    "crash_points",
    "node_loss",
    "cost_sanity",
    "tune_gain",
    "real_models",
    "cpu_threads",
    "mkl_path",
    "gpu_accuracy",
    "inference_accuracy",
    "runs_calibration",
    "predicted_vs_measured",
]
#: Arguments `make bench` gives a bench (the others run with their defaults): kill_soak's default 100 kills take
#: 10-15 minutes on 2 cores, 30 take 3-5.
ARGS = {"kill_soak": ["--kills", "30"]}

HEADER = """# Benchmarks

Written by `make bench` (`python bench/run_all.py`; `--only NAME` reruns one and keeps the others). Each bench
exits non-zero when its target is missed. The blocks between the `bench:` markers are generated; the text around
them is kept.
"""


def first_sentence(script: Path) -> str:
    """The first sentence of ``script``'s module docstring (its first paragraph up to the first '. ')."""
    doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or script.stem
    para = " ".join(doc.split("\n\n")[0].split())
    m = re.search(r"\.(\s|$)", para)
    return para[: m.start() + 1] if m else para


def machine() -> str:
    """CPU model, cores, RAM, Python, Paddle and GPU of this machine, as one line (no Paddle import)."""
    from importlib import metadata

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        ram = f"{psutil.virtual_memory().total / GIB:.1f} GiB RAM"
    except ImportError:
        ram = "RAM unknown"
    paddle = "not installed"
    for dist in ("paddlepaddle", "paddlepaddle-gpu"):
        try:
            paddle = f"{dist} {metadata.version(dist)}"
            break
        except metadata.PackageNotFoundError:
            continue
    gpu = "no GPU"
    if shutil.which("nvidia-smi"):
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        names = [n.strip() for n in r.stdout.splitlines() if n.strip()]
        gpu = f"{len(names)}x {names[0]}" if r.returncode == 0 and names else gpu
    return (
        f"{cpu}, {os.cpu_count()} cores, {ram}; Python {platform.python_version()}, {paddle}; {gpu}; "
        f"{platform.system()} {platform.release()}"
    )


#: A warning raised inside an installed package (``.../site-packages/paddle/...py:712: UserWarning: ...``): not the
#: bench's output; Python prints the warning's source line under it, indented.
THIRD_PARTY_WARNING = re.compile(r"^\S*[/\\](site|dist)-packages[/\\]\S+:\d+: \w*Warning: ")


def clean_output(output: str, roots: list[Path]) -> str:
    """A bench's output as docs/benchmarks.md keeps it: without warnings raised in installed packages (and the
    source line Python prints under each), and with the absolute paths of ``roots`` (the repository that ran it)
    written relative to it, so the generated file holds the benchmark's own output and no path of the machine."""
    kept: list[str] = []
    skip_source = False
    for line in output.splitlines():
        if THIRD_PARTY_WARNING.match(line):
            skip_source = True
            continue
        if skip_source and line.startswith((" ", "\t")) and "warn" in line:
            skip_source = False
            continue
        skip_source = False
        for root in roots:
            line = line.replace(f"{root}{os.sep}", "").replace(str(root), ".")
        kept.append(line)
    return "\n".join(kept).rstrip()


def run_bench(name: str, args: list[str]) -> tuple[int, str, float]:
    """Run ``bench/NAME.py`` with ``args``, echo its output line by line, return (exit code, output, seconds)."""
    cmd = [sys.executable, "-u", str(ROOT / "bench" / f"{name}.py"), *args]
    env = dict(os.environ, COLUMNS=os.environ.get("COLUMNS", "120"), PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    lines: list[str] = []
    with subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
    return proc.returncode, "\n".join(lines), time.perf_counter() - start


def block(name: str, code: int, output: str, seconds: float, when: str, where: str, args: list[str]) -> str:
    """The generated block for one bench run (markers included)."""
    fence = "````" if "```" in output else "```"
    command = " ".join(["python", f"bench/{name}.py", *args])
    return "\n".join(
        [
            f"<!-- bench:{name}:start -->",
            f"{first_sentence(ROOT / 'bench' / f'{name}.py')}",
            "",
            f"- run: {when}, exit code {code} ({'target met' if code == 0 else 'FAILED or target missed'}), "
            f"wall time {seconds:.0f} s",
            f"- machine: {where}",
            f"- command: `{command}`",
            "",
            f"{fence}text",
            output.rstrip(),
            fence,
            f"<!-- bench:{name}:end -->",
        ]
    )


def merge(doc: str, blocks: dict[str, str]) -> str:
    """``doc`` with each bench's block replaced by ``blocks[name]``; a bench without a block gets a section at the
    end (heading + block)."""
    for name, text in blocks.items():
        pattern = re.compile(rf"<!-- bench:{re.escape(name)}:start -->.*?<!-- bench:{re.escape(name)}:end -->", re.S)
        if pattern.search(doc):
            doc = pattern.sub(lambda _m, t=text: t, doc, count=1)
        else:
            doc = doc.rstrip() + f"\n\n## {name}\n\n{text}\n"
    return doc.rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only",
        action="append",
        choices=BENCHES,
        metavar="NAME",
        help=f"run only this bench (repeatable): {', '.join(BENCHES)}",
    )
    ap.add_argument("--doc", type=Path, default=DOC, help="the Markdown file to update [docs/benchmarks.md]")
    opts = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from paddlefit.fileio import atomic_write_text

    where = machine()
    blocks: dict[str, str] = {}
    failed: list[str] = []
    for name in [b for b in BENCHES if not opts.only or b in opts.only]:
        print(f"=== bench/{name}.py", flush=True)
        when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        args = ARGS.get(name, [])
        code, output, seconds = run_bench(name, args)
        output = clean_output(output, [ROOT])
        blocks[name] = block(name, code, output, seconds, when, where, args)
        if code != 0:
            failed.append(f"{name} (exit {code})")
    doc = opts.doc.read_text(encoding="utf-8") if opts.doc.exists() else HEADER
    atomic_write_text(opts.doc, merge(doc, blocks), option="--doc")
    print(f"wrote {opts.doc} ({len(blocks)} bench(es)){'; failed: ' + ', '.join(failed) if failed else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
