"""PaddleDetection object detection on generated images: PicoDet-S with its own loss (``examples/det-picodet.yaml``).

Uses PaddleDetection's ``ppdet`` 2.6.0 as released on PyPI (``paddledet``; ``make test`` and ``make demo`` install
it without its numpy < 1.24 pin, see the Makefile), unchanged. What this module adds is what a PaddleDetection user
writes anyway when the images do not come from a COCO file, and the three things ppdet 2.6.0 needs on Paddle 3.3
(docs/guides/real-models.md has the details):

- :func:`picodet_s`: PicoDet-S built from its classes as ``configs/picodet/picodet_s_320_coco_lcnet.yml`` builds it
  (the wheel ships no configs), with a new ``spatial_scales`` list per build (``LCPAN`` appends to the list it is
  given, ``ppdet/modeling/necks/lc_pan.py:77``, so a second build in one process fails at ``lc_pan.py:125``), inside
  :class:`PPDetStep`, which adds the ``epoch_id`` ppdet's Trainer adds to every batch.
- :func:`box_images`: samples ``{image, gt_bbox, gt_class, pad_gt_mask, im_shape, scale_factor, im_id}`` with the
  class ids as int64: ppdet 2.6.0's assigners add them to an int64 index (``atss_assigner.py:194``,
  ``task_aligned_assigner.py:166``), which Paddle 3.3's type promotion refuses for the int32 its readers make.

In training mode the architecture returns ppdet's loss dict (``loss`` = VFL + GIoU + DFL and its parts): paddlefit
takes its scalar ``loss`` as the model's own loss. In eval mode it returns boxes (ppdet measures mAP, not a loss),
so the example has no eval set; exporting fails inside ppdet (``multiclass_nms``, ``ppdet/modeling/ops.py:584``,
uses the legacy ``LayerHelper.append_op`` that Paddle 3.3's PIR refuses).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle

from paddlefit.errors import PaddlefitError


def _ppdet() -> None:
    try:
        import ppdet.modeling  # noqa: F401
    except Exception as exc:  # not installed, or its own import error
        raise PaddlefitError(
            f"PaddleDetection (ppdet) cannot be imported ({type(exc).__name__}: {exc}); install it "
            "as the Makefile does: pip install --no-deps paddledet==2.6.0 pycocotools"
        ) from None


class PPDetStep(paddle.nn.Layer):
    """A ppdet architecture called as ppdet's Trainer calls it: the batch's tensors (keyword arguments here) in one
    dict plus ``epoch_id`` (it picks the head's label assigner: ATSS before ``static_assigner_epoch``, else
    task-aligned). Training returns ppdet's loss dict, evaluation its predictions (``bbox``, ``bbox_num``)."""

    def __init__(self, arch: paddle.nn.Layer, epoch_id: int = 0) -> None:
        super().__init__()
        self.arch, self.epoch_id = arch, epoch_id

    def forward(self, **inputs: Any) -> Any:
        """``inputs``: the sample dict's tensors, batched (:class:`BoxImages`)."""
        return self.arch({**inputs, "epoch_id": self.epoch_id})


def picodet_s(num_classes: int = 4, epoch_id: int = 0) -> PPDetStep:
    """PaddleDetection's PicoDet-S (``configs/picodet/picodet_s_320_coco_lcnet.yml``: LCNet x0.75, LCPAN of 96
    channels, PicoHeadV2 with the ATSS assigner for the first 100 epochs, then task-aligned; VFL + DFL + GIoU
    losses), randomly initialised, 1,176,576 parameters at 4 classes.

    Raises:
        PaddlefitError: ppdet is not installed, or ``num_classes``/``epoch_id`` is out of range.
    """
    if not isinstance(num_classes, int) or not 1 <= num_classes <= 10000:
        raise PaddlefitError(f"`model_args.num_classes`: expected a whole number 1-10000, got {num_classes!r}.")
    if not isinstance(epoch_id, int) or epoch_id < 0:
        raise PaddlefitError(f"`model_args.epoch_id`: expected a whole number >= 0, got {epoch_id!r}.")
    _ppdet()
    from ppdet.modeling.architectures import PicoDet
    from ppdet.modeling.assigners import ATSSAssigner, TaskAlignedAssigner
    from ppdet.modeling.backbones import LCNet
    from ppdet.modeling.heads import PicoFeat, PicoHeadV2
    from ppdet.modeling.layers import MultiClassNMS
    from ppdet.modeling.losses import DistributionFocalLoss, GIoULoss
    from ppdet.modeling.losses.varifocal_loss import VarifocalLoss
    from ppdet.modeling.necks import LCPAN

    backbone = LCNet(scale=0.75, feature_maps=[3, 4, 5])
    neck = LCPAN(
        in_channels=[s.channels for s in backbone.out_shape],
        out_channels=96,
        use_depthwise=True,
        num_features=4,
        spatial_scales=[0.125, 0.0625, 0.03125],
    )
    head = PicoHeadV2(
        conv_feat=PicoFeat(
            feat_in=96, feat_out=96, num_convs=2, num_fpn_stride=4, norm_type="bn", share_cls_reg=True, use_se=True
        ),
        num_classes=num_classes,
        fpn_stride=[8, 16, 32, 64],
        feat_in_chan=96,
        prior_prob=0.01,
        reg_max=7,
        cell_offset=0.5,
        grid_cell_scale=5.0,
        static_assigner_epoch=100,
        use_align_head=True,
        static_assigner=ATSSAssigner(topk=9, num_classes=num_classes, force_gt_matching=False),
        assigner=TaskAlignedAssigner(topk=13, alpha=1.0, beta=6.0),
        loss_class=VarifocalLoss(use_sigmoid=False, iou_weighted=True, loss_weight=1.0),
        loss_dfl=DistributionFocalLoss(loss_weight=0.5),
        loss_bbox=GIoULoss(loss_weight=2.5),
        nms=MultiClassNMS(nms_top_k=1000, keep_top_k=100, score_threshold=0.025, nms_threshold=0.6),
    )
    return PPDetStep(PicoDet(backbone, neck, head), epoch_id)


class BoxImages(paddle.io.Dataset):
    """Detection samples ``{image: float32[3,S,S], gt_bbox: float32[M,4] (x1, y1, x2, y2 pixels), gt_class:
    int64[M,1], pad_gt_mask: float32[M,1], im_shape, scale_factor: float32[2], im_id: int64[1]}``: 1..M filled
    rectangles of class-coloured pixels on noise, padded to M boxes as ppdet's ``PadGT`` does (module docstring
    for why the classes are int64)."""

    def __init__(self, n: int, size: int, boxes: int, classes: int, seed: int) -> None:
        super().__init__()
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
                self.image[i, :, y : y + h, x : x + w] = colours[c][:, None, None]
                self.bbox[i, j], self.cls[i, j, 0], self.mask[i, j, 0] = (x, y, x + w, y + h), c, 1.0
        self.size = size

    def __len__(self) -> int:
        return len(self.image)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {
            "image": self.image[i],
            "gt_bbox": self.bbox[i],
            "gt_class": self.cls[i],
            "pad_gt_mask": self.mask[i],
            "im_shape": np.full(2, self.size, "float32"),
            "scale_factor": np.ones(2, "float32"),
            "im_id": np.array([i], "int64"),
        }


def box_images(n: int = 16, size: int = 320, boxes: int = 3, classes: int = 4, seed: int = 0) -> BoxImages:
    """``n`` generated detection samples of ``size`` x ``size`` pixels (:class:`BoxImages`), at most ``boxes``
    per image, class ids below ``classes`` (at most the model's ``num_classes``: ppdet's assigners index by them).
    ``size`` is a multiple of 64 (PicoDet's largest stride) and at least 192: the stride-64 level then has the
    3 x 3 = 9 anchors that the ATSS assigner's top-9 needs (``topk=9``; fewer fail inside ppdet's ``topk``).

    Raises:
        PaddlefitError: an argument out of range (names it and the range).
    """
    for name, v, lo, hi in (
        ("n", n, 1, 100_000),
        ("size", size, 192, 2048),
        ("boxes", boxes, 1, 100),
        ("classes", classes, 1, 10000),
        ("seed", seed, 0, 2**32 - 1),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise PaddlefitError(f"`data.*_args.{name}`: expected a whole number {lo}-{hi}, got {v!r}.")
    if size % 64:
        raise PaddlefitError(
            f"`data.*_args.size`: {size} is not a multiple of 64: PicoDet's feature maps are the "
            "image at strides 8, 16, 32 and 64, and LCPAN adds them up; use e.g. 320."
        )
    return BoxImages(n, size, boxes, classes, seed)
