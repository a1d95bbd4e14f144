"""User-side code for jobs on real Paddle library models (importable as `reallibs:...` through PYTHONPATH): what a
user writes anyway (a factory composing a backbone and a head, a loss with the library's own signature, data of
the right structure), nothing that works around paddlefit."""

from __future__ import annotations

import numpy as np

#: PaddleOCR CRNN recogniser: MobileNetV3-small, BiLSTM neck (nn.LSTM), CTC head over 36 characters + blank
CRNN = {"model_type": "rec", "algorithm": "CRNN", "Transform": None,
        "Backbone": {"name": "MobileNetV3", "scale": 0.5, "model_name": "small", "small_stride": [1, 2, 2, 2]},
        "Neck": {"name": "SequenceEncoder", "encoder_type": "rnn", "hidden_size": 48},
        "Head": {"name": "CTCHead", "out_channels": 37, "fc_decay": 0.00001}}  # fmt: skip


def pp_liteseg(num_classes: int = 4):
    """PaddleSeg's PP-LiteSeg on an STDC1 backbone, randomly initialised (``pretrained=None``)."""
    from paddleseg.models import PPLiteSeg
    from paddleseg.models.backbones import STDC1

    return PPLiteSeg(num_classes=num_classes, backbone=STDC1(pretrained=None), pretrained=None)


def ctc_loss(out, label):
    """PaddleOCR's CTCLoss with its own batch convention ``[image, text ids, lengths]`` (the image is not read):
    :func:`paddlefit.ocr.ctc_loss`, the loss of the shipped OCR example, under this module's name."""
    from paddlefit.ocr import ctc_loss as ocr_ctc_loss

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
                self.x[i, :, :, 10 * j: 10 * j + 6] += self.text[i, j] / 37.0

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

    s = SyntheticSamples(n, {"input_ids": ("int64", (seq,), vocab), "token_type_ids": ("int64", (seq,), 1)}, True,
                         seed)  # fmt: skip
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


def picodet_s(num_classes: int = 4, epoch_id: int = 0):
    """PaddleDetection's PicoDet-S (``configs/picodet/picodet_s_320_coco_lcnet.yml``: LCNet x0.75, LCPAN 96, PicoHeadV2
    with the ATSS assigner for the first 100 epochs, then task-aligned; VFL + DFL + GIoU losses), randomly
    initialised, built from its classes as the config builds them (the `paddledet` wheel ships no configs).

    Returned inside :func:`ppdet_step`, which adds the ``epoch_id`` that ppdet's Trainer adds to every batch."""
    from ppdet.modeling.architectures import PicoDet
    from ppdet.modeling.assigners import ATSSAssigner, TaskAlignedAssigner
    from ppdet.modeling.backbones import LCNet
    from ppdet.modeling.heads import PicoFeat, PicoHeadV2
    from ppdet.modeling.layers import MultiClassNMS
    from ppdet.modeling.losses import DistributionFocalLoss, GIoULoss
    from ppdet.modeling.losses.varifocal_loss import VarifocalLoss
    from ppdet.modeling.necks import LCPAN

    backbone = LCNet(scale=0.75, feature_maps=[3, 4, 5])
    # a new spatial_scales list each build: LCPAN appends a fourth scale to the one it is given (lc_pan.py:77),
    # its default list included, and a second build in one process (plan builds twice) then fails at lc_pan.py:125
    neck = LCPAN(in_channels=[s.channels for s in backbone.out_shape], out_channels=96, use_depthwise=True,
                 num_features=4, spatial_scales=[0.125, 0.0625, 0.03125])  # fmt: skip
    head = PicoHeadV2(
        conv_feat=PicoFeat(feat_in=96, feat_out=96, num_convs=2, num_fpn_stride=4, norm_type="bn", share_cls_reg=True,
                           use_se=True),
        num_classes=num_classes, fpn_stride=[8, 16, 32, 64], feat_in_chan=96, prior_prob=0.01, reg_max=7,
        cell_offset=0.5, grid_cell_scale=5.0, static_assigner_epoch=100, use_align_head=True,
        static_assigner=ATSSAssigner(topk=9, num_classes=num_classes, force_gt_matching=False),
        assigner=TaskAlignedAssigner(topk=13, alpha=1.0, beta=6.0),
        loss_class=VarifocalLoss(use_sigmoid=False, iou_weighted=True, loss_weight=1.0),
        loss_dfl=DistributionFocalLoss(loss_weight=0.5), loss_bbox=GIoULoss(loss_weight=2.5),
        nms=MultiClassNMS(nms_top_k=1000, keep_top_k=100, score_threshold=0.025, nms_threshold=0.6))  # fmt: skip
    return ppdet_step(PicoDet(backbone, neck, head), epoch_id)


def ppdet_step(arch, epoch_id: int = 0):
    """A ppdet architecture called as ppdet's Trainer calls it: the batch's tensors (``image``, ``gt_bbox``,
    ``gt_class``, ``pad_gt_mask``, ..., keyword arguments here) in one dict plus ``epoch_id`` (it picks the head's
    label assigner). Training returns ppdet's loss dict (``loss`` and its parts), evaluation its predictions
    (``bbox``, ``bbox_num``)."""
    import paddle

    class PPDetStep(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.arch, self.epoch_id = arch, epoch_id

        def forward(self, **inputs):
            return self.arch({**inputs, "epoch_id": self.epoch_id})

    return PPDetStep()


class BoxImages:
    """Detection samples ``{image: float32[3,S,S], gt_bbox: float32[M,4] (x1, y1, x2, y2 pixels), gt_class:
    int64[M,1], pad_gt_mask: float32[M,1], im_shape, scale_factor: float32[2], im_id: int64[1]}``: 1..M filled
    rectangles of class-coloured pixels on noise, padded to M boxes as ppdet's ``PadGT`` does. The classes are int64:
    ppdet 2.6.0's assigners add them to an int64 index (``atss_assigner.py:194``), which Paddle 3.3 refuses for
    int32 (ppdet's own readers make int32)."""

    def __init__(self, n: int = 16, size: int = 320, boxes: int = 3, classes: int = 4, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.image = rng.standard_normal((n, 3, size, size)).astype("float32") * 0.2
        self.bbox = np.zeros((n, boxes, 4), "float32")
        self.cls = np.zeros((n, boxes, 1), "int64")
        self.mask = np.zeros((n, boxes, 1), "float32")
        colours = rng.uniform(-1.5, 1.5, size=(classes, 3)).astype("float32")
        for i in range(n):
            for j in range(rng.integers(1, boxes + 1)):
                w, h = rng.integers(size // 10, size // 2, size=2)
                x, y = rng.integers(0, size - w), rng.integers(0, size - h)
                c = rng.integers(0, classes)
                self.image[i, :, y:y + h, x:x + w] = colours[c][:, None, None]
                self.bbox[i, j], self.cls[i, j, 0], self.mask[i, j, 0] = (x, y, x + w, y + h), c, 1.0
        self.size = size

    def __len__(self) -> int:
        return len(self.image)

    def __getitem__(self, i: int):
        return {"image": self.image[i], "gt_bbox": self.bbox[i], "gt_class": self.cls[i], "pad_gt_mask": self.mask[i],
                "im_shape": np.full(2, self.size, "float32"), "scale_factor": np.ones(2, "float32"),
                "im_id": np.array([i], "int64")}  # fmt: skip


def box_images(n: int = 16, size: int = 320, seed: int = 0) -> BoxImages:
    """:class:`BoxImages` (a dataset factory)."""
    return BoxImages(n, size, seed=seed)
