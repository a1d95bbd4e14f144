"""``paddlefit train``: run a job spec on 1..N devices with exact resume.

Read :mod:`~paddlefit.train.loop` first (the run in the order it happens); the rest by responsibility:
:mod:`~paddlefit.train.build` (device, model, loss, loader, optimizer, AMP), :mod:`~paddlefit.train.step` (one
optimizer step, the out-of-memory back-off; what ``profile`` and ``tune`` call), :mod:`~paddlefit.train.evaluate`,
:mod:`~paddlefit.train.oom`, :mod:`~paddlefit.train.data` (resumable sampler, loader guards),
:mod:`~paddlefit.train.state` (trainer.json), :mod:`~paddlefit.train.guards` (stop flag, budget, checkpoint
schedule, the errors that stop a run), :mod:`~paddlefit.train.metrics`, :mod:`~paddlefit.train.checkpoint` (atomic,
verified checkpoints: save, load, the choice of the one to resume and the ranks' agreement on it; with
:mod:`~paddlefit.train.ckptfiles`), :mod:`~paddlefit.train.request` (train's options) and :mod:`~paddlefit.train.run`
(``run_job``: in-process or through ``paddle.distributed.launch``, :mod:`~paddlefit.train.launcher` and
:mod:`~paddlefit.train.worker`), :mod:`~paddlefit.train.export` (``paddle.jit.save``). Every file of a run
directory is read and written through :mod:`paddlefit.rundir.files`.
"""
