"""Small user models for tests (imported as `tinymodels:<factory>`)."""

import paddle
from paddle import nn


def mlp(hidden: int = 40, classes: int = 5) -> nn.Layer:
    return nn.Sequential(nn.Linear(30, hidden), nn.ReLU(), nn.Linear(hidden, classes))


class TwoInput(nn.Layer):
    """Takes an image and a token-id sequence (a multi-input model)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2D(3, 8, 3, padding=1)
        self.emb = nn.Embedding(100, 8)
        self.head = nn.Linear(16, 2)

    def forward(self, img, ids):
        a = self.conv(img).mean(axis=[2, 3])
        b = self.emb(ids).mean(axis=1)
        return self.head(paddle.concat([a, b], axis=-1))


class ReturnsLoss(nn.Layer):
    """Returns its own scalar loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return (self.fc(x) ** 2).mean()


def not_a_layer_factory():
    raise RuntimeError("factory exploded")


def frozen() -> nn.Layer:
    layer = nn.Linear(8, 1)
    for p in layer.parameters():
        p.stop_gradient = True
    return layer


def noisy() -> nn.Layer:
    print("hello from the factory")
    return nn.Linear(8, 1)


def fdwrite():
    """Writes to file descriptor 1 in forward (as C++ code or a subprocess would), and runs more layers when the
    batch is larger than 1 (a forward whose ops depend on the batch size)."""
    import os

    import paddle

    class FdWrite(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.layers = paddle.nn.LayerList([paddle.nn.Linear(8, 8) for _ in range(4)])

        def forward(self, x):
            os.write(1, b"FD1 WRITE\n")
            for layer in self.layers[: 1 if x.shape[0] == 1 else 4]:
                x = layer(x)
            return x

    return FdWrite()
