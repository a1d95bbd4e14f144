"""The layout of a run directory (``paddlefit train --run-dir DIR``) and of a checkpoint in it: every file and
folder name, in one place. Train writes them (rank 0 only), resume, export, report, predict and ``runs`` read them.

::

    DIR/
      job.yaml            the spec as run (SPEC_FILE)          metrics.jsonl  one JSON line per event (METRICS_FILE)
      status.json         how the run ended (STATUS_FILE)      summary.json   the run's figures (SUMMARY_FILE)
      snapshot.json       the machine (SNAPSHOT_FILE)          prediction.json / comparison.json  plan vs run
      profile.json        `paddlefit profile`'s result         import_dirs.json  folders of the user's modules
      .lock / .lock.json  the run lock and who holds it        .job-launch.yaml  the spec the launched ranks read
      launch-logs/        Paddle launcher's worker logs        report.html    `paddlefit report`'s page
      inference/          `paddlefit export`'s model           checkpoints/step-NNNNNNNN/  (below)
      visualdl/           VisualDL's logs (``visualdl: true``)

    step-NNNNNNNN/  model.pdparams, optimizer.pdopt, trainer.json, rng.json (earlier runs: rng.pkl), manifest.json

Only the names live here; every path built from them and every read and write of these files is in
:mod:`paddlefit.rundir.files`; each file's format is documented where it is made.
"""

from __future__ import annotations

SPEC_FILE = "job.yaml"
LAUNCH_SPEC_FILE = ".job-launch.yaml"
METRICS_FILE = "metrics.jsonl"
STATUS_FILE = "status.json"
SUMMARY_FILE = "summary.json"
SNAPSHOT_FILE = "snapshot.json"
PREDICTION_FILE = "prediction.json"
COMPARISON_FILE = "comparison.json"
PROFILE_FILE = "profile.json"
#: The folders the run found the user's modules in (:func:`paddlefit.process.userimport.user_dirs`), for ``export``.
IMPORT_DIRS_FILE = "import_dirs.json"
LOCK_FILE = ".lock"
LOCK_INFO_FILE = ".lock.json"
LAUNCH_LOG_DIR = "launch-logs"
#: Rank 0's log in :data:`LAUNCH_LOG_DIR` (Paddle's launcher names them ``workerlog.<local rank>``).
RANK0_LOG = "workerlog.0"
#: The launcher's own output in :data:`LAUNCH_LOG_DIR`.
LAUNCHER_LOG = "launcher.log"
CHECKPOINTS_DIR = "checkpoints"
EXPORT_DIR = "inference"
REPORT_FILE = "report.html"
#: VisualDL's logs (``visualdl: true`` in the spec).
VISUALDL_DIR = "visualdl"

#: Files of one checkpoint (``checkpoints/step-NNNNNNNN/``).
MODEL_FILE = "model.pdparams"
OPTIMIZER_FILE = "optimizer.pdopt"
TRAINER_FILE = "trainer.json"
RNG_FILE = "rng.json"
#: Earlier checkpoints pickled their RNG state (read only when the checkpoint is trusted).
LEGACY_RNG_FILE = "rng.pkl"
#: Every file's size and sha256 and the step (:func:`paddlefit.train.checkpoint.verify`), written last.
MANIFEST_FILE = "manifest.json"

#: Names whose presence makes a folder a run directory (``train`` refuses to nest a run inside another).
RUN_MARKERS = (LOCK_INFO_FILE, SPEC_FILE, METRICS_FILE, STATUS_FILE, SUMMARY_FILE, SNAPSHOT_FILE, CHECKPOINTS_DIR)

#: the ``event`` of metrics.jsonl's line for a resume (:func:`paddlefit.train.metrics.resume_record` writes it,
#: ``report`` reads it)
RESUME_EVENT = "resume"
#: how a run that recorded its end ended, by exit code (any other code: ``failed``); ``runs`` and ``report`` both
#: name a run's state from here (``report`` adds ``running``, and ``lost`` for a run that never recorded its end)
STATUS_NAMES = {0: "finished", 3: "nonfinite", 4: "budget", 130: "stopped", 143: "stopped", 203: "stopped"}


def status_name(code: object) -> str:
    """The state of a run that ended with exit code ``code`` (:data:`STATUS_NAMES`; ``failed`` otherwise)."""
    return STATUS_NAMES.get(code, "failed") if isinstance(code, int) and not isinstance(code, bool) else "failed"
