"""User-side code for jobs on real Paddle library models (importable as `reallibs:...` through PYTHONPATH): what a
user writes anyway (a factory composing a backbone and a head, a loss with the library's own signature, data of
the right structure), nothing that works around paddlefit."""

from __future__ import annotations

import numpy as np

#: PaddleOCR CRNN recogniser: MobileNetV3-small, BiLSTM neck (nn.LSTM), CTC head over 36 characters + blank
CRNN = {
    "model_type": "rec",
    "algorithm": "CRNN",
    "Transform": None,
    "Backbone": {"name": "MobileNetV3", "scale": 0.5, "model_name": "small", "small_stride": [1, 2, 2, 2]},
    "Neck": {"name": "SequenceEncoder", "encoder_type": "rnn", "hidden_size": 48},
    "Head": {"name": "CTCHead", "out_channels": 37, "fc_decay": 0.00001},
}


def pp_liteseg(num_classes: int = 4):
    """PaddleSeg's PP-LiteSeg on an STDC1 backbone, randomly initialised (``pretrained=None``)."""
    from paddleseg.models import PPLiteSeg
    from paddleseg.models.backbones import STDC1

    return PPLiteSeg(num_classes=num_classes, backbone=STDC1(pretrained=None), pretrained=None)


def ctc_loss(out, label):
    """PaddleOCR's CTCLoss with its own batch convention ``[image, text ids, lengths]`` (the image is not read):
    :func:`paddlefit.examples.ocr.ctc_loss`, the loss of the shipped OCR example, under this module's name."""
    from paddlefit.examples.ocr import ctc_loss as ocr_ctc_loss

    return ocr_ctc_loss(out, label)


class TextLines:
    """Text-line crops for a recogniser: dict samples ``{x: float32[3,32,100], label: {text: int32[10], length}}``;
    each line's ids are drawn in [1, 37) (0 is CTC's blank) and the image encodes them as bright columns."""

    def __init__(self, n: int = 32, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.length = rng.integers(4, 11, size=n)
        self.text = rng.integers(1, 37, size=(n, 10)).astype("int32")
        self.x = rng.standard_normal((n, 3, 32, 100)).astype("float32") * 0.1
        for i in range(n):
            for j in range(self.length[i]):
                self.x[i, :, :, 10 * j : 10 * j + 6] += self.text[i, j] / 37.0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return {"x": self.x[i], "label": {"text": self.text[i], "length": np.int64(self.length[i])}}


def text_lines(n: int = 32, seed: int = 0) -> TextLines:
    """:class:`TextLines` (a dataset factory)."""
    return TextLines(n, seed)


def lm_tokens(n: int = 16, seq: int = 64, vocab: int = 32000, seed: int = 0):
    """Causal-LM samples ``{input_ids, labels}`` (labels = the ids: PaddleNLP shifts them inside its criterion)."""
    from trainhelpers import SyntheticSamples

    s = SyntheticSamples(n, {"input_ids": ("int64", (seq,), vocab)}, True, seed)
    s.names.append("labels")
    s.cols.append(s.cols[0])
    return s


def token_tags(n: int = 64, seq: int = 32, vocab: int = 500, tags: int = 5, seed: int = 0):
    """Token-classification samples ``{input_ids, token_type_ids, labels: int64[seq]}`` (tag = id mod tags)."""
    from trainhelpers import SyntheticSamples

    s = SyntheticSamples(n, {"input_ids": ("int64", (seq,), vocab), "token_type_ids": ("int64", (seq,), 1)}, True, seed)
    s.names.append("labels")
    s.cols.append(s.cols[0] % tags)
    return s


class EmbeddedLengths:
    """``(float32[seq, dim] embedded sequence, int64 length in [5, seq], int64 class)`` samples, the inputs of
    PaddleNLP's ``seq2vec`` encoders (``forward(inputs, sequence_length)``)."""

    def __init__(self, n: int = 64, seq: int = 20, dim: int = 32, classes: int = 4, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.y = rng.integers(0, classes, size=n)
        self.x = rng.standard_normal((n, seq, dim)).astype("float32")
        self.x[np.arange(n), :, self.y] += 2
        self.lengths = rng.integers(5, seq + 1, size=n)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], np.int64(self.lengths[i]), np.int64(self.y[i])


def embedded_lengths(n: int = 64, seed: int = 0) -> EmbeddedLengths:
    """:class:`EmbeddedLengths` (a dataset factory)."""
    return EmbeddedLengths(n, seed=seed)
