"""Models: the zoo and user-model resolution (:mod:`.zoo`), building with LazyGuard or for real (:mod:`.build`),
how a job calls its model and takes its loss (:mod:`.calling`), zoo transformers (:mod:`.transformer`) and the
examples' small networks (:mod:`.examples`). Paddle is imported only when a model is built."""

from paddlefit.models.zoo import ModelRef, parse_model_args, resolve_model, zoo_names

__all__ = ["ModelRef", "parse_model_args", "resolve_model", "zoo_names"]
