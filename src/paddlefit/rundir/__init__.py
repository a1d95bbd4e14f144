"""A run directory (``paddlefit train --run-dir DIR``) in one place: ``layout`` (every file and folder name, the
status names, the metrics events), ``files`` (every path built from them and every read and write of them, for
train, export, report, predict and ``runs`` alike), ``checkpoint_files`` (a checkpoint directory's files: the
manifest, ``model.pdparams``, ``trainer.json``, ``rng.json``)."""
