"""PaddleOCR text recognition and text detection on generated images, through PaddleOCR's own data pipeline.

The two OCR examples (``examples/ocr-rec-crnn.yaml``, ``examples/ocr-det-db.yaml``) use PaddleOCR's training code
as shipped in the ``unstructured-paddleocr`` 2.10.0 wheel (package ``unstructured_paddleocr.ppocr``; ``make test``
and ``make demo`` install it, see the Makefile): its model builder, its losses and its data operators, unchanged.
What this module adds is what a PaddleOCR user writes anyway when the images do not come from a label file:

- :func:`text_lines`: a ``paddle.io.Dataset`` of text-line crops. The images are generated once (digits and lower
  case letters drawn with OpenCV's Hershey fonts on noisy backgrounds) and kept **encoded** (PNG or JPEG bytes,
  ``cv2.imencode``), as an LMDB or a folder of files holds them; ``__getitem__`` runs PaddleOCR's recognition
  transforms of ``configs/rec/rec_mv3_none_bilstm_ctc.yml`` on them: ``DecodeImage`` (BGR), ``CTCLabelEncode``,
  ``RecResizeImg`` (resize to ``[3, 32, 100]`` with right padding, normalised to [-1, 1]) and ``KeepKeys``.
- :func:`text_boxes`: a ``paddle.io.Dataset`` of scene images with known text polygons, kept encoded with a
  PaddleOCR detection label (the JSON of a ``label_file_list`` line); ``__getitem__`` runs the transforms of
  ``configs/det/det_mv3_db.yml``: ``DecodeImage``, ``DetLabelEncode``, ``MakeBorderMap``, ``MakeShrinkMap``,
  ``NormalizeImage``, ``ToCHWImage`` and ``KeepKeys``.
- :func:`ctc_loss` and :func:`db_loss`: PaddleOCR's ``CTCLoss`` and ``DBLoss`` called with PaddleOCR's own batch
  convention (``[image, label...]``) from a paddlefit batch.

Samples are dicts ``{"x": image, "label": {...}}``: ``x`` is the keyword argument of PaddleOCR's ``BaseModel.
forward(x, data=None)``, and the label dict reaches the loss as the DataLoader collates it. The datasets do the
decoding and the transforms in ``__getitem__``, so ``paddlefit profile`` and ``tune`` see a real input pipeline
(and DataLoader workers help it).

Importing this module imports Paddle; OpenCV and PaddleOCR's training code are imported when a dataset or loss
is built (a missing one is a :class:`~paddlefit.errors.PaddlefitError` naming the fix).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import paddle

from paddlefit.errors import PaddlefitError

#: ``CTCLabelEncode``'s character set when no ``character_dict_path`` is given (PaddleOCR
#: ``ppocr/data/imaug/label_ops.py``, ``BaseRecLabelEncode``): 36 characters; id 0 is CTC's blank, so a CTC head
#: over them has 37 outputs
CHARSET = "0123456789abcdefghijklmnopqrstuvwxyz"

#: PaddleOCR's ``Architecture`` of ``configs/rec/rec_mv3_none_bilstm_ctc.yml`` (CRNN: MobileNetV3-large x0.5
#: backbone, a BiLSTM ``SequenceEncoder`` of hidden size 96, a CTC head), with the head's ``out_channels`` that
#: PaddleOCR's ``tools/train.py`` fills in from the character set (36 + blank)
CRNN = {
    "model_type": "rec",
    "algorithm": "CRNN",
    "Transform": None,
    "Backbone": {"name": "MobileNetV3", "scale": 0.5, "model_name": "large"},
    "Neck": {"name": "SequenceEncoder", "encoder_type": "rnn", "hidden_size": 96},
    "Head": {"name": "CTCHead", "fc_decay": 0, "out_channels": len(CHARSET) + 1},
}

#: PaddleOCR's ``Architecture`` of ``configs/det/det_mv3_db.yml`` (DB: MobileNetV3-large x0.5 backbone, DBFPN of
#: 256 channels, DBHead with the binarisation steepness k = 50)
DB = {
    "model_type": "det",
    "algorithm": "DB",
    "Transform": None,
    "Backbone": {"name": "MobileNetV3", "scale": 0.5, "model_name": "large"},
    "Neck": {"name": "DBFPN", "out_channels": 256},
    "Head": {"name": "DBHead", "k": 50},
}

#: ``DBLoss`` settings of ``configs/det/det_mv3_db.yml``
DB_LOSS = {"balance_loss": True, "main_loss_type": "DiceLoss", "alpha": 5, "beta": 10, "ohem_ratio": 3}

#: ``NormalizeImage`` of ``configs/det/det_mv3_db.yml``: ImageNet mean and std of RGB channels in [0, 1]
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_ENCODINGS = (".png", ".jpg")


def _need_ocr() -> Any:
    """PaddleOCR's data operators module ``ppocr.data.imaug`` (and OpenCV), or a clear error."""
    try:
        import cv2  # noqa: F401
        from unstructured_paddleocr.ppocr.data import imaug
    except ImportError as exc:
        raise PaddlefitError(
            f"the OCR examples need PaddleOCR's training code and OpenCV ({exc}): install the "
            "`real` extra and `pip install --no-deps unstructured-paddleocr==2.10.0 "
            "albumentations==2.0.8 albucore==0.0.24` (what `make test` does)."
        ) from None
    return imaug


def _check(name: str, ok: bool, what: str) -> None:
    if not ok:
        raise PaddlefitError(f"OCR dataset `{name}`: {what}")


def _whole(name: str, **values: Any) -> None:
    """Each keyword is a whole number (not a bool) between 0 and 2^32 - 1 (seeds included), or the error names it."""
    for key, v in values.items():
        _check(
            name,
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32,
            f"`{key}` must be a whole number >= 0 (got {v!r}).",
        )


def _noisy_background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """``uint8[h, w, 3]`` BGR: a random colour, a linear gradient and Gaussian noise (sigma 8 grey levels)."""
    base = rng.uniform(0, 255, size=3)
    ramp = np.linspace(0, 1, w)[None, :, None] * rng.uniform(-60, 60, size=3)
    img = base + ramp + rng.normal(0, 8, size=(h, w, 3))
    return np.clip(img, 0, 255).astype("uint8")


def _ink(rng: np.random.Generator, background: np.ndarray) -> tuple[int, int, int]:
    """A text colour far from the background's mean (each channel at least 100 grey levels away)."""
    mean = background.reshape(-1, 3).mean(axis=0)
    return tuple(int(rng.uniform(0, 60)) if m > 127 else int(rng.uniform(195, 255)) for m in mean)


_FONTS = (0, 2, 3, 4)  # cv2.FONT_HERSHEY_SIMPLEX, DUPLEX, COMPLEX, TRIPLEX: strokes that read as text at 32 px


def _encode(name: str, img: np.ndarray, encoding: str) -> bytes:
    import cv2

    ok, buf = cv2.imencode(encoding, img)
    _check(name, ok, f"cv2.imencode({encoding!r}) failed")
    return buf.tobytes()


def _run(name: str, ops: list[Any], data: dict[str, Any], i: int) -> list[Any]:
    """PaddleOCR's ``transform(data, ops)``; its operators return None for a sample they reject (an image that
    does not decode, a label with no usable character or box): an error naming the sample, not a None batch."""
    from unstructured_paddleocr.ppocr.data.imaug import transform

    out = transform(data, ops)
    _check(
        name,
        out is not None,
        f"PaddleOCR's transforms rejected sample {i} (an operator returned None: the "
        "image does not decode or its label has no usable text).",
    )
    return out


class TextLines(paddle.io.Dataset):
    """Encoded text-line images and their transcriptions; PaddleOCR's recognition transforms in ``__getitem__``.

    Sample ``i``: ``{"x": float32[3, H, W] in [-1, 1], "label": {"text": int64[max_text_length], "length":
    int64[]}}``; ``text`` holds the characters' ids (1..36 over :data:`CHARSET`, 0 = CTC blank and padding).

    Attributes:
        images: the encoded images (PNG or JPEG bytes, ``uint8[h, w, 3]`` BGR once decoded; ``h`` about 29..47 and ``w``
            about 43..214 pixels, from the drawn text's size).
        texts: each image's transcription (:data:`CHARSET` characters).
        ops: PaddleOCR's operators (``create_operators`` of the config's transform list).
    """

    def __init__(
        self, images: list[bytes], texts: list[str], image_shape: tuple[int, int, int], max_text_length: int
    ) -> None:
        super().__init__()
        imaug = _need_ocr()
        self.images, self.texts = images, texts
        # CTCLabelEncode without a character_dict_path logs "model can only recognize number and lower letters"
        # (PaddleOCR's logger, on every build): that is CHARSET, on purpose
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            self.ops = self._operators(imaug, image_shape, max_text_length)
        finally:
            logging.disable(previous)

    @staticmethod
    def _operators(imaug: Any, image_shape: tuple[int, int, int], max_text_length: int) -> list[Any]:
        """``create_operators`` of ``Train.dataset.transforms`` in ``configs/rec/rec_mv3_none_bilstm_ctc.yml``."""
        return imaug.create_operators(
            [
                {"DecodeImage": {"img_mode": "BGR", "channel_first": False}},
                {"CTCLabelEncode": {"max_text_length": max_text_length}},
                {"RecResizeImg": {"image_shape": list(image_shape)}},
                {"KeepKeys": {"keep_keys": ["image", "label", "length"]}},
            ]
        )

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        image, text, length = _run("text_lines", self.ops, {"image": self.images[i], "label": self.texts[i]}, i)
        return {"x": image, "label": {"text": text.astype("int64"), "length": np.int64(length)}}


def text_lines(
    n: int = 512,
    min_chars: int = 3,
    max_chars: int = 10,
    image_shape: tuple[int, int, int] = (3, 32, 100),
    max_text_length: int = 25,
    encoding: str = ".png",
    seed: int = 0,
) -> TextLines:
    """Generated text lines for a CTC recogniser: ``n`` images of ``min_chars..max_chars`` random characters of
    :data:`CHARSET`, each drawn in a random Hershey font, scale and colour on a noisy gradient background, encoded
    as ``encoding`` bytes; decoded and transformed by PaddleOCR in ``__getitem__`` (:class:`TextLines`).

    Args:
        n: number of images (PNG: 4-21 KB each, 10 KB on average; the background noise does not compress).
        image_shape: ``RecResizeImg``'s ``[C, H, W]`` (``configs/rec/rec_mv3_none_bilstm_ctc.yml``: ``[3, 32,
            100]``); a line is resized to height ``H`` keeping its aspect ratio (at most ``W`` wide) and padded
            with zeros on the right.
        max_text_length: ``CTCLabelEncode``'s label length (the config's ``Global.max_text_length``: 25);
            ``max_chars`` must not exceed it.
        encoding: ``.png`` (lossless) or ``.jpg`` (``cv2.imencode``'s default quality 95).
        seed: the generator's seed (another seed, other images: use one for train and another for eval).

    Raises:
        PaddlefitError: bad arguments, or PaddleOCR/OpenCV missing.
    """
    name = "text_lines"
    _whole(name, n=n, min_chars=min_chars, max_chars=max_chars, max_text_length=max_text_length, seed=seed)
    _check(
        name,
        isinstance(image_shape, list | tuple) and len(image_shape) == 3,
        f"`image_shape` must be [3, H, W] (got {image_shape!r}).",
    )
    _whole(name, **{f"image_shape[{i}]": v for i, v in enumerate(image_shape)})
    _check(name, n >= 1, f"n must be >= 1 (got {n}).")
    _check(
        name,
        1 <= min_chars <= max_chars <= max_text_length,
        f"need 1 <= min_chars <= max_chars <= max_text_length (got {min_chars}, {max_chars}, {max_text_length}).",
    )
    _check(
        name,
        len(image_shape) == 3 and image_shape[0] == 3 and image_shape[1] >= 8 and image_shape[2] >= 8,
        f"image_shape must be [3, H, W] with H, W >= 8 (got {list(image_shape)}).",
    )
    _check(name, encoding in _ENCODINGS, f"encoding must be one of {', '.join(_ENCODINGS)} (got {encoding!r}).")
    _need_ocr()
    import cv2

    rng = np.random.default_rng(seed)
    images, texts = [], []
    for _ in range(n):
        text = "".join(rng.choice(list(CHARSET), size=int(rng.integers(min_chars, max_chars + 1))))
        font, scale, thick = int(rng.choice(_FONTS)), float(rng.uniform(0.7, 1.0)), int(rng.integers(1, 3))
        (tw, th), base = cv2.getTextSize(text, font, scale, thick)
        h, w = th + base + int(rng.integers(6, 16)), tw + int(rng.integers(6, 20))
        img = _noisy_background(rng, h, w)
        cv2.putText(
            img,
            text,
            (int(rng.integers(2, w - tw + 1)), h - base - int(rng.integers(1, 4))),
            font,
            scale,
            _ink(rng, img),
            thick,
            cv2.LINE_AA,
        )
        images.append(_encode(name, img, encoding))
        texts.append(text)
    return TextLines(images, texts, tuple(image_shape), max_text_length)


class TextBoxes(paddle.io.Dataset):
    """Encoded scene images with PaddleOCR detection labels; PaddleOCR's DB transforms in ``__getitem__``.

    Sample ``i``: ``{"x": float32[3, S, S] (ImageNet-normalised), "label": {"threshold_map", "threshold_mask",
    "shrink_map", "shrink_mask": float32[S, S]}}``, the four maps ``DBLoss`` reads, in ``KeepKeys``' order of
    ``configs/det/det_mv3_db.yml``.

    Attributes:
        images: the encoded images (PNG or JPEG bytes of ``uint8[S, S, 3]`` BGR).
        labels: each image's label as a line of a PaddleOCR ``label_file_list`` holds it: JSON
            ``[{"transcription": str, "points": [[x, y] x 4]}, ...]`` (pixels, clockwise from the top left).
        ops: PaddleOCR's operators.
    """

    def __init__(self, images: list[bytes], labels: list[str]) -> None:
        super().__init__()
        imaug = _need_ocr()
        self.images, self.labels = images, labels
        self.ops = imaug.create_operators(
            [
                {"DecodeImage": {"img_mode": "BGR", "channel_first": False}},
                {"DetLabelEncode": None},
                {"MakeBorderMap": {"shrink_ratio": 0.4, "thresh_min": 0.3, "thresh_max": 0.7}},
                {"MakeShrinkMap": {"shrink_ratio": 0.4, "min_text_size": 8}},
                {
                    "NormalizeImage": {
                        "scale": "1./255.",
                        "mean": list(IMAGENET_MEAN),
                        "std": list(IMAGENET_STD),
                        "order": "hwc",
                    }
                },
                {"ToCHWImage": None},
                {"KeepKeys": {"keep_keys": ["image", "threshold_map", "threshold_mask", "shrink_map", "shrink_mask"]}},
            ]
        )

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        image, tmap, tmask, smap, smask = _run(
            "text_boxes", self.ops, {"image": self.images[i], "label": self.labels[i]}, i
        )
        return {
            "x": image,
            "label": {
                "threshold_map": tmap,
                "threshold_mask": tmask,
                "shrink_map": smap.astype("float32"),
                "shrink_mask": smask,
            },
        }


def text_boxes(n: int = 128, size: int = 160, max_boxes: int = 4, encoding: str = ".jpg", seed: int = 0) -> TextBoxes:
    """Generated scene images for a DB detector: ``n`` square images of side ``size`` on noisy gradient backgrounds,
    each with 1..``max_boxes`` words of :data:`CHARSET` drawn (Hershey fonts) inside a filled box whose corners are
    the word's polygon, boxes not overlapping; encoded as ``encoding`` bytes with the polygons as a PaddleOCR
    detection label, and decoded and transformed by PaddleOCR in ``__getitem__`` (:class:`TextBoxes`).

    Args:
        n: number of images (JPEG at 160x160: about 15 KB each).
        size: image side in pixels, a multiple of 32 (DB's backbone downsamples 32x and DBFPN adds the 1/4, 1/8,
            1/16 and 1/32 maps; ``configs/det/det_mv3_db.yml`` crops 640x640, 160 keeps the example fast).
        max_boxes: most words per image (>= 1); fewer are drawn when they do not fit without overlapping.
        encoding: ``.jpg`` (``cv2.imencode``'s default quality 95) or ``.png``.
        seed: the generator's seed.

    Raises:
        PaddlefitError: bad arguments, or PaddleOCR/OpenCV missing.
    """
    name = "text_boxes"
    _whole(name, n=n, size=size, max_boxes=max_boxes, seed=seed)
    _check(name, n >= 1, f"n must be >= 1 (got {n}).")
    _check(name, size >= 64 and size % 32 == 0, f"size must be a multiple of 32, at least 64 (got {size}).")
    _check(name, max_boxes >= 1, f"max_boxes must be >= 1 (got {max_boxes}).")
    _check(name, encoding in _ENCODINGS, f"encoding must be one of {', '.join(_ENCODINGS)} (got {encoding!r}).")
    _need_ocr()
    import cv2

    rng = np.random.default_rng(seed)
    images, labels = [], []
    for _ in range(n):
        img = _noisy_background(rng, size, size)
        taken = np.zeros((size, size), dtype=bool)
        boxes: list[dict[str, Any]] = []
        for _try in range(8 * max_boxes):
            if len(boxes) == max_boxes:
                break
            text = "".join(rng.choice(list(CHARSET), size=int(rng.integers(2, 7))))
            font, scale, thick = int(rng.choice(_FONTS)), float(rng.uniform(0.5, 0.9)), int(rng.integers(1, 3))
            (tw, th), base = cv2.getTextSize(text, font, scale, thick)
            pad = int(rng.integers(2, 6))
            bw, bh = tw + 2 * pad, th + base + 2 * pad
            if bw >= size - 4 or bh >= size - 4:
                continue
            x0, y0 = int(rng.integers(2, size - bw - 1)), int(rng.integers(2, size - bh - 1))
            if taken[max(y0 - 3, 0) : y0 + bh + 3, max(x0 - 3, 0) : x0 + bw + 3].any():
                continue
            taken[y0 : y0 + bh, x0 : x0 + bw] = True
            fill = _noisy_background(rng, bh, bw)
            img[y0 : y0 + bh, x0 : x0 + bw] = fill
            cv2.putText(img, text, (x0 + pad, y0 + pad + th), font, scale, _ink(rng, fill), thick, cv2.LINE_AA)
            x1, y1 = x0 + bw - 1, y0 + bh - 1
            boxes.append({"transcription": text, "points": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]})
        _check(name, bool(boxes), f"no word fits in a {size}x{size} image; use a larger size.")
        images.append(_encode(name, img, encoding))
        labels.append(json.dumps(boxes))
    return TextBoxes(images, labels)


def _label_part(label: Any, key: str, loss: str) -> Any:
    if not isinstance(label, dict) or key not in label:
        got = f"a dict with keys {sorted(label)}" if isinstance(label, dict) else type(label).__name__
        raise PaddlefitError(
            f"`{loss}` needs the label dict of paddlefit.examples.ocr's datasets (key {key!r}); got {got}."
        )
    return label[key]


def ctc_loss(out: Any, label: Any) -> Any:
    """PaddleOCR's ``CTCLoss`` (``ppocr/losses/rec_ctc_loss.py``: ``paddle.nn.CTCLoss`` with blank 0 and every
    time step of the head's output used, the mean over the batch) with its batch convention ``[image, text ids,
    lengths]`` (the image is not read).

    In eval mode PaddleOCR's ``CTCHead`` returns softmax probabilities instead of logits
    (``ppocr/modeling/heads/rec_ctc_head.py``); ``paddle.nn.CTCLoss`` applies its own softmax, so an output whose
    rows are probabilities (all >= 0, each row summing to 1 within 1e-4) is passed as its logarithm, whose softmax
    is the probabilities again: the eval loss is the same CTC loss as in training.

    Args:
        out: the CTC head's output ``float32[B, T, classes]`` (T = 25 for a ``[3, 32, 100]`` input to CRNN).
        label: ``{"text": int[B, L] ids (0-padded), "length": int64[B]}`` (:func:`text_lines`' label).

    Returns:
        The scalar loss (PaddleOCR's ``{"loss": ...}["loss"]``).
    """
    from unstructured_paddleocr.ppocr.losses import build_loss

    text, length = _label_part(label, "text", "ctc_loss"), _label_part(label, "length", "ctc_loss")
    if (
        isinstance(out, paddle.Tensor)
        and out.ndim == 3
        and bool(out.min() >= 0)
        and bool(((out.sum(axis=-1) - 1).abs() < 1e-4).all())
    ):
        out = paddle.log(out.clip(min=1e-30))
    return build_loss({"name": "CTCLoss"})(out, [None, text, length])["loss"]


def db_loss(out: Any, label: Any) -> Any:
    """PaddleOCR's ``DBLoss`` (``ppocr/losses/det_db_loss.py``, settings :data:`DB_LOSS` of
    ``configs/det/det_mv3_db.yml``) with its batch convention ``[image, threshold_map, threshold_mask, shrink_map,
    shrink_mask]``.

    In training DBHead returns ``{"maps": float32[B, 3, S, S]}`` (shrink, threshold and binary maps) and this is
    DBLoss: ``alpha`` (5) x balanced BCE on the shrink map + ``beta`` (10) x masked L1 on the threshold map + dice
    on the binary map. In eval mode DBHead returns only the shrink map ``[B, 1, S, S]``: the loss is then DBLoss's
    terms that the shrink map alone determines, 5 x balanced BCE + dice, both on the shrink map (PaddleOCR itself
    evaluates DB by its box metric, not a loss).

    Args:
        out: DBHead's output dict.
        label: ``{"threshold_map", "threshold_mask", "shrink_map", "shrink_mask": float32[B, S, S]}``
            (:func:`text_boxes`' label).

    Returns:
        The scalar loss.
    """
    from unstructured_paddleocr.ppocr.losses import build_loss

    parts = [_label_part(label, k, "db_loss") for k in ("threshold_map", "threshold_mask", "shrink_map", "shrink_mask")]
    if not isinstance(out, dict) or "maps" not in out:
        raise PaddlefitError(f"`db_loss` needs DBHead's output dict {{'maps': ...}}; got {type(out).__name__}.")
    loss = build_loss({"name": "DBLoss", **DB_LOSS})
    maps = out["maps"]
    if maps.shape[1] == 1:  # eval mode: the shrink map only
        shrink = maps[:, 0, :, :]
        return loss.alpha * loss.bce_loss(shrink, parts[2], parts[3]) + loss.dice_loss(shrink, parts[2], parts[3])
    # DBLoss adds a [1]-shaped zero (its CBN term): the sum is [1]; a step's loss is a scalar
    return loss(out, [None, *parts])["loss"].reshape([])
