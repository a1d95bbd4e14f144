"""Small models for the shipped examples (``examples/*.yaml``), built from ``paddle.nn`` layers.

Neither uses BatchNorm or Dropout, so data parallel over N devices with per-device batch B computes exactly the
same update as one device with batch N*B (up to float round-off): the property the trainer's tests check.
"""

from __future__ import annotations

from typing import Any


def digits_cnn(num_classes: int = 10, width: int = 16) -> Any:
    """CNN for ``float32[1,8,8]`` digits: conv3x3(1->w) ReLU conv3x3(w->2w) ReLU maxpool2 -> 2w*4*4 -> 64 -> classes.

    Input ``[N, 1, 8, 8]``, output logits ``[N, num_classes]``.
    """
    import paddle.nn as nn

    return nn.Sequential(
        nn.Conv2D(1, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv2D(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2D(2),
        nn.Flatten(),
        nn.Linear(2 * width * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def text_cnn(
    vocab_size: int = 6000,
    embed_dim: int = 64,
    channels: int = 128,
    kernel_size: int = 3,
    num_classes: int = 2,
    sparse: bool = False,
) -> Any:
    """Character CNN (Kim 2014, one kernel width): embedding -> Conv1D -> ReLU -> max over time -> linear.

    Input ``int64[N, L]`` character ids (0 = padding), output logits ``[N, num_classes]``. ``sparse``: the
    embedding's gradient holds only the looked-up rows (``paddle.nn.Embedding(sparse=True)``; pair with Adam
    ``lazy_mode: true``).
    """
    import paddle
    import paddle.nn as nn

    class TextCNN(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0, sparse=sparse)
            self.conv = nn.Conv1D(embed_dim, channels, kernel_size, padding=kernel_size // 2)
            self.fc = nn.Linear(channels, num_classes)

        def forward(self, ids: Any) -> Any:
            x = self.embed(ids).transpose([0, 2, 1])  # [N, E, L]
            x = paddle.nn.functional.relu(self.conv(x))
            return self.fc(x.max(axis=2))

    return TextCNN()


def text_bag(
    vocab_size: int = 6000, embed_dim: int = 64, hidden: int = 64, num_classes: int = 2, sparse: bool = False
) -> Any:
    """fastText-style classifier (Joulin et al. 2016, "Bag of Tricks for Efficient Text Classification"): mean of
    the character embeddings (padding id 0 masked out) -> Linear -> ReLU -> Linear. ``sparse``: as in
    :func:`text_cnn`.

    Input ``int64[N, L]`` character ids, output logits ``[N, num_classes]``. About 60x faster than
    :func:`text_cnn` on a CPU (Paddle 3.3.1 runs Conv1D as a 2-D convolution).
    """
    import paddle
    import paddle.nn as nn

    class TextBag(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0, sparse=sparse)
            self.hidden = nn.Linear(embed_dim, hidden)
            self.fc = nn.Linear(hidden, num_classes)

        def forward(self, ids: Any) -> Any:
            mask = (ids > 0).astype("float32").unsqueeze(-1)  # [N, L, 1]
            mean = (self.embed(ids) * mask).sum(axis=1) / mask.sum(axis=1).clip(min=1.0)
            return self.fc(paddle.nn.functional.relu(self.hidden(mean)))

    return TextBag()
