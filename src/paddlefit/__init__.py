"""paddlefit: predict, run and tune PaddlePaddle training jobs on the hardware they will run on.

Command line: ``paddlefit plan resnet50 --batch-size 256`` (``paddlefit --help``; one page per command in
``docs/commands/``). Library: the job spec is :class:`paddlefit.jobspec.spec.JobSpec` (``load_job_spec``); the core
packages (``catalog estimate models plan train diagnose tune deploy llm``) take and return data and never import
typer or rich; ``cli`` is the shell around them. ``docs/architecture.md`` maps every module.

Importing it selects MKL's AVX2 kernels on an AMD CPU for this process and every process it starts, unless the
user set ``MKL_DEBUG_CPU_TYPE`` (:mod:`paddlefit.process.mklpath`): the plan's probe, ``train`` and the library then run
the same arithmetic at the same speed.
"""

from paddlefit.process.mklpath import use_mkl_avx2_path

__version__ = "0.1.0"
__all__ = ["__version__"]

use_mkl_avx2_path()
