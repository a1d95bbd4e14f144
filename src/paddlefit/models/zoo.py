"""Model zoo: names -> Paddle layer factories with default per-sample inputs, and user import paths.

Names:
- every classification model in ``paddle.vision.models`` (built with ``pretrained=False``: nothing is
  downloaded), default input ``float32[3,224,224]`` (inception_v3: ``[3,299,299]``, lenet: ``[1,28,28]``);
- the transformer configs of :mod:`paddlefit.models.transformer`, default input ``int64[128]`` ids;
- ``package.module:factory`` for any user model; ``--model-arg key=value`` passes keyword arguments
  (values parsed as YAML scalars, so ``num_classes=10`` is an int). A PaddleNLP/PaddleFormers model class
  (a ``PretrainedModel`` with a ``config_class``, e.g. ``paddlenlp.transformers:ErnieForSequenceClassification``)
  is built from ``config_class(**model_args)``: randomly initialised, nothing downloaded.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from paddlefit.catalog.transformers import TransformerConfig
from paddlefit.errors import ModelError, PaddlefitError, UnknownNameError
from paddlefit.jobspec.inputs import InputSpec
from paddlefit.models.transformer import TRANSFORMER_CONFIGS, build_transformer
from paddlefit.process.userimport import import_module

#: Every lower-case model factory of ``paddle.vision.models`` in Paddle 3.3.1 (``__all__``).
VISION_MODELS = (
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "resnext50_64x4d",
    "resnext101_32x4d",
    "resnext101_64x4d",
    "resnext152_32x4d",
    "resnext152_64x4d",
    "wide_resnet50_2",
    "wide_resnet101_2",
    "vgg11",
    "vgg13",
    "vgg16",
    "vgg19",
    "mobilenet_v1",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "densenet121",
    "densenet161",
    "densenet169",
    "densenet201",
    "densenet264",
    "shufflenet_v2_x0_25",
    "shufflenet_v2_x0_33",
    "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0",
    "shufflenet_v2_x1_5",
    "shufflenet_v2_x2_0",
    "shufflenet_v2_swish",
    "squeezenet1_0",
    "squeezenet1_1",
    "googlenet",
    "inception_v3",
    "alexnet",
    "lenet",
)

_VISION_INPUT = {"inception_v3": (3, 299, 299), "lenet": (1, 28, 28)}


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: how to build it and what one sample looks like.

    Attributes:
        name: zoo name or the ``pkg.mod:factory`` path.
        factory: zero-argument callable returning a ``paddle.nn.Layer`` (imports Paddle when called).
        default_inputs: per-sample inputs used when the user gives no ``--input``.
        transformer: the config for zoo transformers (enables the analytic path for huge models).
        kwargs: model arguments given with ``--model-arg``.
    """

    name: str
    factory: Callable[[], Any]
    default_inputs: tuple[InputSpec, ...] = ()
    transformer: TransformerConfig | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


def zoo_names() -> list[str]:
    """All zoo model names (vision then transformers)."""
    return [*VISION_MODELS, *TRANSFORMER_CONFIGS]


def zoo_rows() -> list[dict[str, Any]]:
    """``paddlefit models``'s rows: ``{"name", "default_inputs"}`` per zoo model, the inputs as spec strings
    (``float32[3,224,224]``). No model is built."""
    return [{"name": n, "default_inputs": [str(s) for s in resolve_model(n).default_inputs]} for n in zoo_names()]


def parse_model_args(items: list[str] | None) -> dict[str, Any]:
    """Parse ``key=value`` strings into keyword arguments (values read as a job spec's are,
    :func:`paddlefit.jobspec.spec.load_plain_yaml`: plain data; a value that is not YAML stays the string given).

    Raises:
        ModelError: an item has no ``=`` or an empty key, or its value nests too deeply or has a number too long to
            read.
    """
    from paddlefit.jobspec.spec import load_plain_yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ModelError(f"`--model-arg {item!r}` must look like `key=value`, e.g. `num_classes=10`.")
        try:
            out[key.strip()] = load_plain_yaml(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = value
        except ValueError as exc:
            raise ModelError(f"`--model-arg {key.strip()}=...`: the value {exc}.") from None
    return out


#: Largest value of each size field of a zoo transformer's ``--model-arg``s, the parallel planner's bounds
#: (:class:`paddlefit.catalog.transformers.TransformerConfig`): well above every published model (the largest dense
#: ones have ~128 layers, hidden 18,432, vocabularies of 256k), and low enough that the plan's lazy build of the
#: layers takes seconds (1,024 layers: ~3 s; 10^8 layers ran until memory was exhausted).
TRANSFORMER_MAX = {
    "vocab_size": 2**24,
    "hidden_size": 2**20,
    "num_layers": 1024,
    "num_heads": 2**16,
    "ffn_size": 2**22,
    "max_position": 2**24,
    "default_seq_len": 2**24,
    "type_vocab_size": 2**16,
}
#: A zoo transformer's ``--model-arg`` keys: the fields of its config (``catalog.transformers.TransformerConfig``)
#: with ``num_kv_heads`` 0 for multi-head attention, one ``bias`` switch (q/k/v and the other linear layers
#: together) and ``position`` ``learned`` or ``none`` (RoPE), plus ``default_seq_len``: the length of the default
#: input (:data:`DEFAULT_SEQ_LEN`).
TRANSFORMER_ARGS = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "ffn_size",
    "max_position",
    "type_vocab_size",
    "causal",
    "default_seq_len",
    "dropout",
    "num_kv_heads",
    "ffn_type",
    "norm",
    "tie_embeddings",
    "bias",
    "position",
)
#: Tokens of a zoo transformer's default input (``int64[128]``).
DEFAULT_SEQ_LEN = 128


def _transformer_args(cfg: TransformerConfig) -> dict[str, Any]:
    """The ``--model-arg`` view (:data:`TRANSFORMER_ARGS`) of a published zoo config."""
    kv = 0 if cfg.num_kv_heads == cfg.num_heads else cfg.num_kv_heads
    return {k: getattr(cfg, k) for k in TRANSFORMER_ARGS if k in type(cfg).model_fields} | {
        "default_seq_len": DEFAULT_SEQ_LEN,
        "num_kv_heads": kv,
        "bias": cfg.qkv_bias,
        "position": "learned" if cfg.position == "learned" else "none",
    }


def _check_transformer_args(name: str, f: dict[str, Any]) -> None:
    """Raise ModelError naming the first `--model-arg` field of a zoo transformer that is out of range."""
    for key in (
        "vocab_size",
        "hidden_size",
        "num_layers",
        "num_heads",
        "ffn_size",
        "max_position",
        "default_seq_len",
        "type_vocab_size",
    ):
        v, low = f[key], 0 if key == "type_vocab_size" else 1
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= TRANSFORMER_MAX[key]:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise ModelError(
                f"`--model-arg {key}={shown}` for {name}: must be an integer >= {low} and <= {TRANSFORMER_MAX[key]:,}."
            )
    if not isinstance(f["causal"], bool):
        raise ModelError(f"`--model-arg causal={f['causal']!r}` for {name}: must be true or false.")
    if not isinstance(f["dropout"], int | float) or not 0 <= f["dropout"] < 1:
        raise ModelError(f"`--model-arg dropout={f['dropout']!r}` for {name}: must be a number in [0, 1).")
    kv = f["num_kv_heads"]
    if not isinstance(kv, int) or isinstance(kv, bool) or kv < 0:
        raise ModelError(f"`--model-arg num_kv_heads={kv!r}` for {name}: must be an integer >= 0.")
    for key, allowed in (
        ("ffn_type", ("gelu", "swiglu")),
        ("norm", ("layernorm", "rmsnorm")),
        ("position", ("learned", "none")),
    ):
        if f[key] not in allowed:
            raise ModelError(f"`--model-arg {key}={f[key]!r}` for {name}: must be one of {', '.join(allowed)}.")
    for key in ("tie_embeddings", "bias"):
        if not isinstance(f[key], bool):
            raise ModelError(f"`--model-arg {key}={f[key]!r}` for {name}: must be true or false.")
    if f["num_heads"] % (kv or f["num_heads"]):
        raise ModelError(f"{name}: num_heads {f['num_heads']} is not divisible by num_kv_heads {kv}.")
    if f["hidden_size"] % f["num_heads"]:
        raise ModelError(f"{name}: hidden_size {f['hidden_size']} is not divisible by num_heads {f['num_heads']}.")
    if f["default_seq_len"] > f["max_position"]:
        raise ModelError(f"{name}: default_seq_len {f['default_seq_len']} exceeds max_position {f['max_position']}.")


def transformer_with_args(name: str, cfg: TransformerConfig, kwargs: dict[str, Any]) -> tuple[TransformerConfig, int]:
    """A zoo transformer's config changed by ``--model-arg``s (keys :data:`TRANSFORMER_ARGS`), and the length of
    its default input.

    Raises:
        ModelError: an unknown key, or a value out of range (names the key).
    """
    unknown = next((k for k in kwargs if k not in TRANSFORMER_ARGS), None)
    if unknown is not None:  # the words the zoo's former dataclass config raised with
        raise ModelError(
            f"Bad `--model-arg` for {name}: TransformerConfig.__init__() got an unexpected keyword "
            f"argument '{unknown}'."
        )
    f = {**_transformer_args(cfg), **kwargs}
    _check_transformer_args(name, f)
    fields = {k: f[k] for k in TRANSFORMER_ARGS if k in type(cfg).model_fields}
    fields.update(
        name=cfg.name,
        source=f"{cfg.source}; changed by --model-arg {', '.join(kwargs)}",
        num_kv_heads=f["num_kv_heads"] or f["num_heads"],
        qkv_bias=f["bias"],
        linear_bias=f["bias"],
        position="learned" if f["position"] == "learned" else "rope",
        dropout=float(f["dropout"]),
    )
    try:
        return TransformerConfig(**fields), f["default_seq_len"]
    except ValidationError as exc:
        raise ModelError(f"Bad `--model-arg` for {name}: {exc.errors()[0]['msg']}.") from None


def _vision_factory(name: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    def build():
        import paddle.vision.models as models

        if name == "lenet":
            return models.LeNet(**kwargs)
        return getattr(models, name)(pretrained=False, **kwargs)

    return build


def _split_path(path: str) -> tuple[str, str]:
    """(module, attribute) of ``package.module:factory``.

    Raises:
        ModelError: either side of the colon is empty.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ModelError(f"Model path {path!r} must look like `package.module:factory`.")
    return module_name, attr


def _import_factory(path: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    module_name, attr = _split_path(path)
    try:
        module = import_module(module_name, f"model: {path}")
    except PaddlefitError as exc:
        raise ModelError(str(exc)) from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelError(f"Module `{module_name}` has no attribute `{attr}` (model {path!r}).")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ModelError(f"`{path}` is not callable; it must be a class or function returning a Layer.")
    config_class = getattr(obj, "config_class", None)
    if isinstance(obj, type) and isinstance(config_class, type) and hasattr(config_class, "to_dict"):
        # a PaddleNLP/PaddleFormers model class (PretrainedModel): its __init__ takes one config object, so
        # `--model-arg`s are that config's fields (ErnieConfig(vocab_size=..., num_labels=...)); no weights loaded
        own = {k: v for k, v in kwargs.items() if k != "config"}  # the ModelRef keeps `config` in its kwargs
        fields = {**published_config(config_class, kwargs["config"]), **own} if "config" in kwargs else own
        check_config_fields(config_class, fields)
        return lambda: obj(config_class(**fields))
    return lambda: obj(**kwargs)


def check_config_fields(config_class: type, fields: dict[str, Any]) -> None:
    """A PaddleNLP config class takes any keyword (``PretrainedConfig`` keeps unknown ones as attributes), so a
    misspelt field (``num_hidden_layer``) would plan the default-size model without a word: every field must be
    one the class's default config has, one of its ``attribute_map`` aliases, or ``num_labels``/``num_classes``.

    Raises:
        ModelError: names the unknown field and the closest known one.
    """
    try:
        known = set(config_class().to_dict()) | set(getattr(config_class, "attribute_map", {}) or {})
    except Exception:  # a config class that needs arguments: nothing to check against
        return
    known |= {"num_labels", "num_classes"}
    for key in fields:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean `{close[0]}`?" if close else f"; see {config_class.__name__}'s fields"
            raise ModelError(f"`model_args.{key}`: {config_class.__name__} has no field `{key}`{hint}")


def published_config(config_class: type, name: Any) -> dict[str, Any]:
    """The fields of a published model size as the installed library ships them: PaddleNLP's config classes carry
    ``pretrained_init_configuration`` (e.g. ``ErnieConfig``'s ``ernie-3.0-base-zh``: 12 layers, hidden 768,
    vocabulary 40,000; ``paddlenlp/transformers/ernie/configuration.py``), read without downloading anything.

    Raises:
        ModelError: the class ships no published sizes, or ``name`` is not one of them (lists the close ones).
    """
    known = getattr(config_class, "pretrained_init_configuration", None) or {}
    if not isinstance(name, str) or name not in known:
        lower = {k.lower(): k for k in known}
        close = [lower[k] for k in difflib.get_close_matches(str(name).lower(), list(lower), n=5, cutoff=0.5)]
        close = close or list(known)[:8]
        what = (
            f"one of {', '.join(close)}"
            if known
            else ("nothing: it ships no published sizes; give its fields as model_args instead")
        )
        raise ModelError(
            f"`--model-arg config={name}`: {config_class.__name__} has no published size of that name; it knows {what}."
        )
    return dict(known[name])


def resolve_model(name: str, model_args: dict[str, Any] | None = None, *, import_now: bool = True) -> ModelRef:
    """Resolve a zoo name or ``pkg.mod:factory`` into a :class:`ModelRef` (does not build the model).
    ``import_now=False``: a ``pkg.mod:factory`` is imported when the factory is first called, not here (the
    planner's own process never calls it: the user's module runs in the probe's child only, under its limits).

    Raises:
        UnknownNameError: not a zoo name and not an import path; lists close names.
        ModelError: the import path cannot be imported or is not callable (with ``import_now=False``, raised by
            the factory's first call instead).
    """
    kwargs = dict(model_args or {})
    key = name.strip()
    if ":" in key:
        if not import_now:
            _split_path(key)
            return ModelRef(name=key, factory=lambda: _import_factory(key, kwargs)(), kwargs=kwargs)
        return ModelRef(name=key, factory=_import_factory(key, kwargs), kwargs=kwargs)
    low = key.lower()
    if low in VISION_MODELS:
        shape = _VISION_INPUT.get(low, (3, 224, 224))
        return ModelRef(
            name=low,
            factory=_vision_factory(low, kwargs),
            default_inputs=(InputSpec(dtype="float32", shape=shape),),
            kwargs=kwargs,
        )
    if low in TRANSFORMER_CONFIGS:
        cfg, seq = TRANSFORMER_CONFIGS[low], DEFAULT_SEQ_LEN
        if kwargs:
            cfg, seq = transformer_with_args(low, cfg, kwargs)
        return ModelRef(
            name=low,
            factory=lambda: build_transformer(cfg),
            default_inputs=(InputSpec(dtype="int64", shape=(seq,), high=cfg.vocab_size),),
            transformer=cfg,
            kwargs=kwargs,
        )
    close = difflib.get_close_matches(low, zoo_names(), n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownNameError(
        f"Unknown model {name!r}.{hint} Use a zoo name (`paddlefit models` lists them) or your own "
        "model as `package.module:factory`."
    )
