"""Model zoo and user-model resolution (Paddle imported only when a model is built)."""

from paddlefit.models.zoo import ModelRef, parse_model_args, resolve_model, zoo_names

__all__ = ["ModelRef", "parse_model_args", "resolve_model", "zoo_names"]
