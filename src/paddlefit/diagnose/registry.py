"""The check registry of ``paddlefit doctor`` (pylint's scheme): what a check returns and how it is registered.

A check is a pure function ``(Snapshot, JobContext | None) -> list[Finding]`` registered once with
``@check("PF1xx", "slug")``: the registration is the only place its ID and slug are written; every finding the
check returns carries them. IDs taken: PF100-PF113 environment and job checks, PF120-PF123 GPU health, OpenMP,
TF32 and Kunlunxin XPUs (see ``paddlefit.diagnose.checks``). Findings also carry, as data, what their fix does to
the environment (``env`` to export, ``unset`` to remove), so ``launch`` and ``doctor --fix-script`` read fields,
not fix text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from paddlefit.diagnose.snapshot import Snapshot

SEVERITIES = ("ok", "inconclusive", "warn", "error")
#: The severities that are problems: their fixes are applied (``--fix-script``, ``launch``); ``inconclusive`` (a
#: timed check whose result is not clear of the machine's noise) is neither ok nor a problem and has no fix.
PROBLEMS = ("warn", "error")


@dataclass(frozen=True)
class Finding:
    """One result of a check.

    Attributes:
        check_id: the check's stable ID (``PF1xx``); slug: its readable name (both from its registration).
        severity: ``ok``, ``inconclusive`` (a timed check could not tell, no fix), ``warn`` or ``error``.
        title: one line; detail: why, or the numbers behind it ('' when none).
        fix: a command or edit for a human, or ''.
        env: environment variables the fix sets, ``{name: value}`` (empty when it sets none).
        unset: environment variables the fix removes.
    """

    check_id: str
    slug: str
    severity: str
    title: str
    detail: str = ""
    fix: str = ""
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()

    def shell_lines(self) -> list[str]:
        """The fix's effect on the environment as shell lines: ``export NAME=value`` per ``env`` entry, then
        ``unset NAME`` per ``unset`` entry (values as given, unquoted: :func:`fix_script` decides what is safe)."""
        return [f"export {k}={v}" for k, v in self.env.items()] + [f"unset {n}" for n in self.unset]

    def to_dict(self) -> dict[str, Any]:
        """The finding as plain JSON types (``doctor --json``)."""
        d = dataclasses.asdict(self)
        d["unset"] = list(self.unset)
        return d


def found(
    severity: str,
    title: str,
    detail: str = "",
    fix: str = "",
    *,
    env: dict[str, str] | None = None,
    unset: Iterable[str] = (),
) -> Finding:
    """A finding for the check that returns it (its ID and slug are filled in by :class:`Check`). Without
    ``fix``, a fix that only sets/unsets variables gets the shell lines as its text.

    Raises:
        AssertionError: an unknown severity (a bug in a check).
    """
    assert severity in SEVERITIES, severity
    f = Finding("", "", severity, title, detail, fix, dict(env or {}), tuple(unset))
    return f if fix or not (f.env or f.unset) else dataclasses.replace(f, fix="; ".join(f.shell_lines()))


@dataclass(frozen=True)
class JobContext:
    """What the job will ask of the machine (from `doctor` options): all optional.

    Attributes:
        num_workers: DataLoader worker processes per trainer.
        prefetch_factor: batches each worker prepares ahead (Paddle default 2, ``python/paddle/io/reader.py``).
        use_shared_memory: whether workers hand batches over through ``/dev/shm`` (Paddle default True).
        batch_bytes: bytes of one batch of inputs (per-sample input bytes x batch size).
        devices: trainer processes on this machine (one per GPU under data parallel).
        checkpoint_bytes: size of one checkpoint (model states of the plan), bytes.
    """

    num_workers: int | None = None
    prefetch_factor: int = 2
    use_shared_memory: bool = True
    batch_bytes: int | None = None
    devices: int = 1
    checkpoint_bytes: int | None = None


CheckFn = Callable[[Snapshot, "JobContext | None"], list[Finding]]


@dataclass(frozen=True)
class Check:
    """A registered check: call it like the function it wraps; its findings carry ``check_id`` and ``slug``.

    Attributes:
        check_id: stable ID (``PF1xx``), never reused; slug: readable name; fn: the check function.
    """

    check_id: str
    slug: str
    fn: CheckFn

    @property
    def description(self) -> str:
        """The first paragraph of the check function's docstring (what it checks and its source)."""
        doc = (self.fn.__doc__ or "").strip().split("\n\n")[0]
        return " ".join(doc.split())

    def __call__(self, s: Snapshot, job: JobContext | None = None) -> list[Finding]:
        return [dataclasses.replace(f, check_id=self.check_id, slug=self.slug) for f in self.fn(s, job)]


#: Every registered check, in registration order (``run_checks`` runs them in ID order).
REGISTRY: list[Check] = []


def check(check_id: str, slug: str) -> Callable[[CheckFn], Check]:
    """Register a check under a stable ID (``PF1xx``) and slug, both unique.

    Raises:
        AssertionError: the ID or slug is taken (a bug).
    """
    assert re.fullmatch(r"PF\d{3}", check_id) and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", slug), (check_id, slug)

    def deco(fn: CheckFn) -> Check:
        assert all(c.check_id != check_id and c.slug != slug for c in REGISTRY), (check_id, slug)
        c = Check(check_id, slug, fn)
        REGISTRY.append(c)
        return c

    return deco


_SAFE_LINE = re.compile(r"^(export [A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.,:^=/+-]*|unset [A-Za-z_][A-Za-z0-9_]*)$")


def fix_script(findings: list[Finding]) -> str:
    """The fixes that set or unset environment variables as ``export NAME=value`` / ``unset NAME`` lines, safe to
    ``eval``; anything else (odd names or values from the environment or a snapshot) becomes a comment, never a
    command."""
    lines = []
    for f in findings:
        if f.severity not in PROBLEMS:
            continue
        for line in f.shell_lines():
            lines.append(line if _SAFE_LINE.match(line) else f"# {f.check_id}: not safe to run as shell: {line!r}")
    return "\n".join(lines) if lines else "# nothing to fix with environment variables"


def fix_env(findings: list[Finding], prefix: str = "") -> dict[str, str]:
    """The variables the problems' fixes set (``Finding.env`` of every warn/error finding), those whose name starts
    with ``prefix``; a later finding wins over an earlier one."""
    out: dict[str, str] = {}
    for f in findings:
        if f.severity in PROBLEMS:
            out.update({k: v for k, v in f.env.items() if k.startswith(prefix)})
    return out
