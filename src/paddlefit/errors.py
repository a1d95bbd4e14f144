"""User-facing errors. The CLI prints them without a traceback and exits with their ``exit_code``: 2 for bad input,
1 for :class:`JobFailedError` (the table of exit codes is ``docs/errors.md``)."""

from __future__ import annotations


class PaddlefitError(Exception):
    """Base class of every error caused by the user's input (bad name, bad file, bad value).

    The message is one paragraph: what is wrong, the value found, and how to fix it.
    """

    exit_code = 2


class CatalogError(PaddlefitError):
    """A catalog file (GPU specs, calibration) is malformed; the message names file, row and field."""


class ModelError(PaddlefitError):
    """A model cannot be found, imported or built, or it rejects its inputs."""


class InputSpecError(PaddlefitError):
    """An ``--input`` spec such as ``float32[3,224,224]`` does not parse."""


class UnknownNameError(PaddlefitError):
    """A name (model, GPU, option value) is not known; the message lists close matches."""


class JobSpecError(PaddlefitError):
    """A job spec file does not parse or validate; the message names the file and the key."""


class JobFailedError(PaddlefitError):
    """The job itself failed after it started: out of memory at micro-batch 1, the model raising mid-training. Not
    bad input, so exit code 1."""

    exit_code = 1
