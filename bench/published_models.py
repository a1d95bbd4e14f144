"""Paddle re-implementations of the models in ``shared/data/gpu-training-measurements.csv`` not already in paddlefit.

ResNet-50 (``paddle.vision.models.resnet50``) and BERT-base/large (:mod:`paddlefit.models.transformer`) exist
already; this module adds the other five, so a per-operator model can trace their forward pass:

============================  =============================================  ==========================================
key                           measured rows (source)                         reference implementation copied
============================  =============================================  ==========================================
``ssd300``                    M38-M41 (DLE PyTorch SSD300 v1.1)              NVIDIA DeepLearningExamples
                                                                             ``PyTorch/Detection/SSD/ssd/model.py``
``unet_medical``              M42-M45 (DLE TF2 UNet_Medical)                 DeepLearningExamples ``TensorFlow2/
                                                                             Segmentation/UNet_Medical/model/``
``hrnet_w18_fcn``             M17-M18 (Paddle Perf, PaddleSeg FCN-HRNetW18)  PaddleSeg ``models/fcn.py`` +
                                                                             ``models/backbones/hrnet.py``
``deeplabv3p_resnet50_vd``    M19-M20 (Paddle Perf, PaddleSeg DeepLabV3P)    PaddleSeg ``models/deeplab.py``,
                                                                             ``backbones/resnet_vd.py``,
                                                                             ``layers/pyramid_pool.py``
``transformer_big``           M12-M16 (Paddle Perf, PaddleNLP), M34-M37      PaddleNLP ``transformers/transformer/
                              (DLE fairseq ``transformer_wmt_en_de_big_t2t``)  modeling.py`` (``TransformerModel``)
============================  =============================================  ==========================================

Every factory imports Paddle when called (this module imports fast), builds real sizes (nothing shrunk) and
returns a ``paddle.nn.Layer`` in its default (train) mode, with dropout and batch-norm layers where the reference
has them. ``BENCH_MODELS`` maps each key to ``(factory, per-sample input specs)``; the specs are paddlefit input
strings (``dtype[dims]``, ``:high`` = id range).

Where the source is silent (or sources disagree), the choice made is stated in the factory's docstring under
"Assumptions". In short:

- ssd300: torchvision ResNet-50 (v1.5, stride on the 3x3 conv) = ``paddle.vision.models.resnet50``; DLE's
  NHWC/AMP/DALI options change no shapes. The loss (hard-negative mining) and box decoding are not part of the
  model and are left out.
- unet_medical: the input is 572x572 (EM slices resized to 388x388 then padded to 572x572), not the 512x512 of the
  raw slices named in the CSV; unpadded ('valid') 3x3 convs as in the implementation; output 388x388.
- hrnet_w18_fcn: the benchmark config (``bias: false`` in the FCN head, ``padding_same: false``), as in the
  Paddle Perf logs.
- deeplabv3p_resnet50_vd: ``multi_grid`` (1, 2, 4) and ``aspp_out_channels`` 256 from the PaddleSeg config in the
  Perf log; the ASPP's same-size bilinear resizes are kept because PaddleSeg runs them.
- transformer_big: the PaddleNLP benchmark run (pre-LayerNorm, final encoder/decoder LayerNorms, ReLU FFN,
  shared 33712-token vocabulary, sinusoidal positions as a non-trainable buffer); per-sample length 128 for
  source and target is a modelling choice, since the published runs use token batches.

Run ``.venv/bin/python bench/published_models.py`` to build every model, run one forward pass at batch 1 and 2
on CPU and print output shapes, parameter counts (against the published ones) and wall times.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import paddle

__all__ = [
    "BENCH_MODELS",
    "PUBLISHED_PARAMS",
    "deeplabv3p_resnet50_vd",
    "hrnet_w18_fcn",
    "ssd300",
    "transformer_big",
    "unet_medical",
]

#: WMT14 en-de vocabulary of PaddleNLP's transformer example: ``vocab_all.bpe.33708`` padded up to a multiple
#: of ``pad_factor`` 8 (= 33712; the benchmark runs load ``vocab_all.bpe.33712`` directly), shared by source
#: and target (``weight_sharing: True``).
WMT14_ENDE_VOCAB = 33712


def _conv_bn(
    cin: int,
    cout: int,
    k: int,
    stride: int = 1,
    padding: int | None = None,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = False,
    act: bool = True,
) -> paddle.nn.Layer:
    """Conv2D -> BatchNorm2D (-> ReLU); ``padding`` defaults to ``k // 2``; ``bias`` adds a conv bias."""
    from paddle import nn

    pad = k // 2 if padding is None else padding
    layers: list[nn.Layer] = [
        nn.Conv2D(
            cin,
            cout,
            k,
            stride=stride,
            padding=pad,
            dilation=dilation,
            groups=groups,
            bias_attr=None if bias else False,
        ),
        nn.BatchNorm2D(cout),
    ]
    if act:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------------- SSD300 v1.1
def ssd300(num_classes: int = 81) -> paddle.nn.Layer:
    """SSD300 v1.1 with a ResNet-50 backbone, as NVIDIA DeepLearningExamples ``PyTorch/Detection/SSD``.

    Architecture: Liu et al. 2016 "SSD: Single Shot MultiBox Detector" (arXiv 1512.02325) with the backbone
    replaced as in DLE ``ssd/model.py`` (classes ``ResNet`` and ``SSD300``): torchvision ResNet-50 truncated after
    ``layer3`` (conv4_x), whose first block has stride 1 (conv2 and the downsample conv), so a 300x300 image gives
    a 38x38x1024 map; five additional blocks (1x1 conv -> BN -> ReLU -> 3x3 conv -> BN -> ReLU, no conv biases,
    channels 1024->256->512, 512->256->512, 512->128->256 with stride 2 and padding 1, then 256->128->256 twice
    with stride 1 and no padding) give 19, 10, 5, 3, 1; a 3x3 loc conv (4 x boxes) and a 3x3 conf conv
    (classes x boxes), both with bias, per level, with (4, 6, 6, 6, 4, 4) default boxes: 8732 boxes in all.

    Input: float32[3,300,300] images.
    Output: ``(locs, confs)``: float32 (N, 4, 8732) box offsets and float32 (N, num_classes, 8732) class logits
    (81 = 80 COCO classes + background), concatenated over the six levels in DLE's order.

    Assumptions:
        - torchvision's ResNet-50 is v1.5 (stride on the 3x3 conv), the same layout as
          ``paddle.vision.models.resnet50``, which is used here with the strides changed after construction as
          DLE does. ``layer4``, the pooling and the classifier are not built.
        - The loss (smooth-L1 + cross-entropy with hard negative mining) and box encoding are outside the model
          and not included; DLE's NHWC, AMP and DALI options change no shapes.
    """
    import paddle
    from paddle import nn
    from paddle.vision.models import resnet50

    num_defaults = (4, 6, 6, 6, 4, 4)
    out_channels = (1024, 512, 512, 256, 256, 256)
    mid_channels = (256, 256, 128, 128, 128)

    class SSD300(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            r = resnet50(pretrained=False)
            self.feature_extractor = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2, r.layer3)
            conv4_block1 = r.layer3[0]
            conv4_block1.conv1._stride = [1, 1]
            conv4_block1.conv2._stride = [1, 1]
            conv4_block1.downsample[0]._stride = [1, 1]
            blocks = []
            for i, (cin, cout, mid) in enumerate(zip(out_channels[:-1], out_channels[1:], mid_channels, strict=True)):
                stride, pad = (2, 1) if i < 3 else (1, 0)
                blocks.append(nn.Sequential(_conv_bn(cin, mid, 1), _conv_bn(mid, cout, 3, stride=stride, padding=pad)))
            self.additional_blocks = nn.LayerList(blocks)
            self.loc = nn.LayerList(
                [nn.Conv2D(c, n * 4, 3, padding=1) for n, c in zip(num_defaults, out_channels, strict=True)]
            )
            self.conf = nn.LayerList(
                [nn.Conv2D(c, n * num_classes, 3, padding=1) for n, c in zip(num_defaults, out_channels, strict=True)]
            )

        def forward(self, x: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
            x = self.feature_extractor(x)
            feeds = [x]
            for block in self.additional_blocks:
                x = block(x)
                feeds.append(x)
            n = x.shape[0]
            locs = [head(f).reshape([n, 4, -1]) for head, f in zip(self.loc, feeds, strict=True)]
            confs = [head(f).reshape([n, num_classes, -1]) for head, f in zip(self.conf, feeds, strict=True)]
            return paddle.concat(locs, axis=2), paddle.concat(confs, axis=2)

    return SSD300()


# ------------------------------------------------------------------------------------------------- U-Net (medical)
def unet_medical(n_classes: int = 2) -> paddle.nn.Layer:
    """The U-Net of NVIDIA DeepLearningExamples ``TensorFlow2/Segmentation/UNet_Medical`` (EM segmentation).

    Architecture: Ronneberger et al. 2015 "U-Net: Convolutional Networks for Biomedical Image Segmentation"
    (arXiv 1505.04597), as written in DLE ``model/unet.py`` and ``model/layers.py``: every 3x3 conv is unpadded
    ('valid') with bias and ReLU; encoder 64, 128, 256, 512 filters (two convs, 2x2 max-pool each), bottleneck
    two 1024 convs -> dropout 0.5 -> 3x3 stride-2 'same' transposed conv (with ReLU) to 512; each decoder block
    centre-crops the skip to the upsampled size, concatenates [upsampled, skip], runs two convs (512, 256, 128)
    and a 3x3 stride-2 transposed conv (with ReLU) to half the filters; the output block concatenates with the
    first skip, runs two 64 convs and a 1x1 conv to ``n_classes``.

    Input: float32[1,572,572], one grey-level EM slice. DLE ``data_loading/data_loader.py`` resizes each 512x512
    ISBI slice to 388x388 and pads it to 572x572 (``_normalize_inputs``; the synthetic-data path ``synth_fn``
    also makes 572x572x1 inputs), so the 512x512 of the CSV is the raw slice, not the network input.
    Output: float32 (N, n_classes, 388, 388) per-pixel logits (the labels are cropped to 388x388).

    Assumptions:
        - TF's 3x3 stride-2 'same' transposed conv pads (0 before, 1 after) in the forward-conv sense; it is
          written as ``Conv2DTranspose(padding=[0, 1, 0, 1])``, which gives the same 2x output size and FLOPs.
        - NCHW here (the TF code is NHWC); the layout changes no op shapes other than the axis order.
        - Like the DLE model (and unlike the paper's 2x2 up-convs), the up-convs are 3x3, so the parameter count
          is a little above the paper's ~31.0M.
    """
    import paddle
    from paddle import nn

    def double_conv(cin: int, cout: int) -> nn.Layer:
        return nn.Sequential(nn.Conv2D(cin, cout, 3), nn.ReLU(), nn.Conv2D(cout, cout, 3), nn.ReLU())

    def up_conv(cin: int, cout: int) -> nn.Layer:
        return nn.Sequential(nn.Conv2DTranspose(cin, cout, 3, stride=2, padding=[0, 1, 0, 1]), nn.ReLU())

    def crop_and_concat(x: paddle.Tensor, skip: paddle.Tensor) -> paddle.Tensor:
        h, w = x.shape[2], x.shape[3]
        top, left = (skip.shape[2] - h) // 2, (skip.shape[3] - w) // 2
        return paddle.concat([x, skip[:, :, top : top + h, left : left + w]], axis=1)

    class UNet(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.input_block = double_conv(1, 64)
            self.down_blocks = nn.LayerList([double_conv(cin, c) for cin, c in ((64, 128), (128, 256), (256, 512))])
            self.pool = nn.MaxPool2D(2, 2)
            self.bottleneck = double_conv(512, 1024)
            self.dropout = nn.Dropout(0.5)
            self.bottleneck_up = up_conv(1024, 512)
            self.up_blocks = nn.LayerList(
                [nn.Sequential(double_conv(2 * c, c), up_conv(c, c // 2)) for c in (512, 256, 128)]
            )
            self.output_block = nn.Sequential(double_conv(128, 64), nn.Conv2D(64, n_classes, 1))

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            skips = [self.input_block(x)]
            out = self.pool(skips[0])
            for block in self.down_blocks:
                skips.append(block(out))
                out = self.pool(skips[-1])
            out = self.bottleneck_up(self.dropout(self.bottleneck(out)))
            for block in self.up_blocks:
                out = block(crop_and_concat(out, skips.pop()))
            return self.output_block(crop_and_concat(out, skips.pop()))

    return UNet()


# ------------------------------------------------------------------------------------------------ FCN-HRNet-W18
def hrnet_w18_fcn(num_classes: int = 19, head_bias: bool = False) -> paddle.nn.Layer:
    """PaddleSeg FCN with the HRNet_W18 backbone (``fcn_hrnetw18_1024x512_cityscapes``, Cityscapes).

    Architecture: Wang et al. 2020 "Deep High-Resolution Representation Learning for Visual Recognition"
    (arXiv 1908.07919) as PaddleSeg ``paddleseg/models/backbones/hrnet.py`` ``HRNet_W18``: stem of two 3x3
    stride-2 ConvBNReLU (3->64->64); stage 1 = 4 bottlenecks (64 -> 256, the first with a 1x1 projection);
    stages 2/3/4 = 1/4/3 high-resolution modules with branch widths (18, 36), (18, 36, 72), (18, 36, 72, 144),
    4 basic blocks per branch, fuse layers (1x1 ConvBN + bilinear upsample from lower resolutions; chains of 3x3
    stride-2 convs from higher ones, the inner ones ConvBNReLU with the source branch's width, as PaddleSeg
    writes them) and transitions (3x3 ConvBNReLU; a new branch = 3x3 stride 2 from the lowest one). Output: the
    four branches bilinearly upsampled to 1/4 and concatenated (270 channels). Head as PaddleSeg
    ``models/fcn.py`` ``FCNHead``: 1x1 ConvBNReLU 270->270, 1x1 conv to classes; logits bilinearly resized to
    the input (``align_corners=False``).

    Input: float32[3,512,1024] (H x W = 512 x 1024, the 1024x512 Cityscapes crop).
    Output: float32 (N, num_classes, 512, 1024) logits.

    Assumptions:
        - The Paddle Perf runs used PaddleSeg's benchmark config (test_tipc ``fcn_hrnetw18_1024x512_cityscapes``,
          logged in Perf ``HRNetW18/logs``): ``bias: false`` for the FCN head convs (``head_bias=False`` here;
          PaddleSeg's default is True) and ``padding_same: false`` (numeric padding k // 2; for these even
          sizes this gives the same shapes as 'same').
        - Batch norm is plain BatchNorm2D (SyncBatchNorm on one GPU is BatchNorm2D in PaddleSeg).
    """
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    class Bottleneck(nn.Layer):
        def __init__(self, cin: int, filters: int, downsample: bool) -> None:
            super().__init__()
            self.conv1 = _conv_bn(cin, filters, 1)
            self.conv2 = _conv_bn(filters, filters, 3)
            self.conv3 = _conv_bn(filters, filters * 4, 1, act=False)
            self.conv_down = _conv_bn(cin, filters * 4, 1, act=False) if downsample else None

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            y = self.conv3(self.conv2(self.conv1(x)))
            residual = self.conv_down(x) if self.conv_down is not None else x
            return F.relu(y + residual)

    class BasicBlock(nn.Layer):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.conv1 = _conv_bn(channels, channels, 3)
            self.conv2 = _conv_bn(channels, channels, 3, act=False)

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            return F.relu(self.conv2(self.conv1(x)) + x)

    class Transition(nn.Layer):
        def __init__(self, cins: tuple[int, ...], couts: tuple[int, ...]) -> None:
            super().__init__()
            layers = []
            for i, cout in enumerate(couts):
                if i < len(cins):
                    layers.append(_conv_bn(cins[i], cout, 3) if cins[i] != cout else nn.Identity())
                else:
                    layers.append(_conv_bn(cins[-1], cout, 3, stride=2))
            self.layers = nn.LayerList(layers)
            self.n_in = len(cins)

        def forward(self, xs: list[paddle.Tensor]) -> list[paddle.Tensor]:
            return [layer(xs[i] if i < self.n_in else xs[-1]) for i, layer in enumerate(self.layers)]

    class FuseLayers(nn.Layer):
        def __init__(self, channels: tuple[int, ...]) -> None:
            super().__init__()
            self.channels = channels
            funcs = []
            for i in range(len(channels)):
                for j in range(len(channels)):
                    if j > i:
                        funcs.append(_conv_bn(channels[j], channels[i], 1, act=False))
                    elif j < i:
                        pre = channels[j]
                        for k in range(i - j):
                            last = k == i - j - 1
                            cout = channels[i] if last else channels[j]
                            funcs.append(_conv_bn(pre, cout, 3, stride=2, act=not last))
                            pre = cout
            self.funcs = nn.LayerList(funcs)

        def forward(self, xs: list[paddle.Tensor]) -> list[paddle.Tensor]:
            outs, idx = [], 0
            for i in range(len(self.channels)):
                residual = xs[i]
                for j in range(len(self.channels)):
                    if j > i:
                        y = self.funcs[idx](xs[j])
                        idx += 1
                        residual = residual + F.interpolate(
                            y, size=residual.shape[-2:], mode="bilinear", align_corners=False
                        )
                    elif j < i:
                        y = xs[j]
                        for _ in range(i - j):
                            y = self.funcs[idx](y)
                            idx += 1
                        residual = residual + y
                outs.append(F.relu(residual))
            return outs

    class HRModule(nn.Layer):
        def __init__(self, channels: tuple[int, ...], num_blocks: int = 4) -> None:
            super().__init__()
            self.branches = nn.LayerList([nn.Sequential(*[BasicBlock(c) for _ in range(num_blocks)]) for c in channels])
            self.fuse = FuseLayers(channels)

        def forward(self, xs: list[paddle.Tensor]) -> list[paddle.Tensor]:
            return self.fuse([branch(x) for branch, x in zip(self.branches, xs, strict=True)])

    class Stage(nn.Layer):
        def __init__(self, channels: tuple[int, ...], num_modules: int) -> None:
            super().__init__()
            self.modules_ = nn.LayerList([HRModule(channels) for _ in range(num_modules)])

        def forward(self, xs: list[paddle.Tensor]) -> list[paddle.Tensor]:
            for module in self.modules_:
                xs = module(xs)
            return xs

    class HRNetW18(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            c2, c3, c4 = (18, 36), (18, 36, 72), (18, 36, 72, 144)
            self.conv_layer1_1 = _conv_bn(3, 64, 3, stride=2)
            self.conv_layer1_2 = _conv_bn(64, 64, 3, stride=2)
            self.la1 = nn.Sequential(*[Bottleneck(64 if i == 0 else 256, 64, downsample=i == 0) for i in range(4)])
            self.tr1, self.st2 = Transition((256,), c2), Stage(c2, 1)
            self.tr2, self.st3 = Transition(c2, c3), Stage(c3, 4)
            self.tr3, self.st4 = Transition(c3, c4), Stage(c4, 3)
            self.feat_channels = sum(c4)

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            x = self.la1(self.conv_layer1_2(self.conv_layer1_1(x)))
            st4 = self.st4(self.tr3(self.st3(self.tr2(self.st2(self.tr1([x]))))))
            size = st4[0].shape[-2:]
            ups = [F.interpolate(t, size=size, mode="bilinear", align_corners=False) for t in st4[1:]]
            return paddle.concat([st4[0], *ups], axis=1)

    class FCN(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = HRNetW18()
            c = self.backbone.feat_channels
            self.conv_1 = _conv_bn(c, c, 1, bias=head_bias)
            self.cls = nn.Conv2D(c, num_classes, 1, bias_attr=None if head_bias else False)

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            logit = self.cls(self.conv_1(self.backbone(x)))
            return F.interpolate(logit, size=x.shape[-2:], mode="bilinear", align_corners=False)

    return FCN()


# --------------------------------------------------------------------------------------- DeepLabV3+ ResNet50_vd
def deeplabv3p_resnet50_vd(num_classes: int = 19) -> paddle.nn.Layer:
    """PaddleSeg DeepLabV3+ with a ResNet50_vd backbone at output stride 8 (Cityscapes 1024x512 config).

    Architecture: Chen et al. 2018 "Encoder-Decoder with Atrous Separable Convolution for Semantic Image
    Segmentation" (arXiv 1802.02611) as PaddleSeg ``models/deeplab.py`` (``DeepLabV3P``, ``DeepLabV3PHead``,
    ``Decoder``), ``models/layers/pyramid_pool.py`` (``ASPPModule``) and ``models/backbones/resnet_vd.py``
    (``ResNet50_vd``), config ``deeplabv3p_resnet50_os8_cityscapes_1024x512_80k.yml``:

    - ResNet50_vd (He et al. 2019 "Bag of Tricks", arXiv 1812.01187): stem 3x3 convs 3->32 (stride 2), 32->32,
      32->64, 3x3 stride-2 max-pool; bottleneck stages (3, 4, 6, 3) with the stride on the 3x3 conv; the
      projection shortcut of a strided block is 2x2 avg-pool (ceil) + 1x1 conv ("vd"); output stride 8: stage 3
      dilation 2, stage 4 dilation 4 x multi_grid (1, 2, 4), both stride 1; no conv biases.
    - ASPP on the stage-4 output (2048 channels, 1/8): 1x1 ConvBNReLU and, for rates 12/24/36, separable convs
      (dilated depthwise 3x3 ConvBN + 1x1 ConvBNReLU), each resized (bilinear) to the input size; image pooling
      (global average pool + 1x1 ConvBNReLU without bias, resized back); concat (1280) -> 1x1 ConvBNReLU 256 ->
      dropout 0.1. These convs have biases (PaddleSeg's default) except the pooling branch.
    - Decoder: stage-1 output (256 channels, 1/4) -> 1x1 ConvBNReLU 48; ASPP output resized to 1/4; concat
      (304) -> two separable ConvBNReLU 256 -> 1x1 conv to classes; logits resized (bilinear) to the input.

    Input: float32[3,512,1024] (H x W = 512 x 1024).
    Output: float32 (N, num_classes, 512, 1024) logits.

    Assumptions:
        - The exact PaddleSeg commit of the Feb 2022 "benchmark" branch run is not known; the code follows
          PaddleSeg's release code, whose config (ResNet50_vd, output_stride 8, multi_grid [1, 2, 4],
          backbone_indices [0, 3], aspp_ratios [1, 12, 24, 36], 19 classes) matches the one printed in the Perf
          log, whose paddle.flops line gives 26,794,243 parameters.
        - ``align_corners=False`` (the config value); batch norm is plain BatchNorm2D.
    """
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    class ConvBNLayer(nn.Layer):
        def __init__(
            self,
            cin: int,
            cout: int,
            k: int,
            stride: int = 1,
            dilation: int = 1,
            is_vd_mode: bool = False,
            act: bool = False,
        ) -> None:
            super().__init__()
            self.pool = nn.AvgPool2D(2, 2, padding=0, ceil_mode=True) if is_vd_mode else None
            pad = (k - 1) // 2 if dilation == 1 else dilation
            self.conv = _conv_bn(cin, cout, k, stride=stride, padding=pad, dilation=dilation, act=act)

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            return self.conv(self.pool(x) if self.pool is not None else x)

    class BottleneckVd(nn.Layer):
        def __init__(self, cin: int, filters: int, stride: int, shortcut: bool, if_first: bool, dilation: int) -> None:
            super().__init__()
            self.conv0 = ConvBNLayer(cin, filters, 1, act=True)
            self.conv1 = ConvBNLayer(filters, filters, 3, stride=stride, dilation=dilation, act=True)
            self.conv2 = ConvBNLayer(filters, filters * 4, 1)
            self.short = (
                None if shortcut else ConvBNLayer(cin, filters * 4, 1, is_vd_mode=not (if_first or stride == 1))
            )

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            y = self.conv2(self.conv1(self.conv0(x)))
            short = x if self.short is None else self.short(x)
            return F.relu(short + y)

    class ResNet50Vd(nn.Layer):
        def __init__(self, multi_grid: tuple[int, int, int] = (1, 2, 4)) -> None:
            super().__init__()
            depth, num_channels, num_filters = (3, 4, 6, 3), (64, 256, 512, 1024), (64, 128, 256, 512)
            dilation_dict = {2: 2, 3: 4}  # output_stride 8
            self.conv1_1 = ConvBNLayer(3, 32, 3, stride=2, act=True)
            self.conv1_2 = ConvBNLayer(32, 32, 3, act=True)
            self.conv1_3 = ConvBNLayer(32, 64, 3, act=True)
            self.pool2d_max = nn.MaxPool2D(3, 2, padding=1)
            stages = []
            for b in range(4):
                blocks = []
                for i in range(depth[b]):
                    d = dilation_dict.get(b, 1) * (multi_grid[i] if b == 3 else 1)
                    blocks.append(
                        BottleneckVd(
                            num_channels[b] if i == 0 else num_filters[b] * 4,
                            num_filters[b],
                            stride=2 if i == 0 and b != 0 and d == 1 else 1,
                            shortcut=i > 0,
                            if_first=b == i == 0,
                            dilation=d,
                        )
                    )
                stages.append(nn.Sequential(*blocks))
            self.stages = nn.LayerList(stages)
            self.feat_channels = [c * 4 for c in num_filters]

        def forward(self, x: paddle.Tensor) -> list[paddle.Tensor]:
            y = self.pool2d_max(self.conv1_3(self.conv1_2(self.conv1_1(x))))
            feats = []
            for stage in self.stages:
                y = stage(y)
                feats.append(y)
            return feats

    def sep_conv(cin: int, cout: int, dilation: int = 1) -> nn.Layer:
        # PaddleSeg SeparableConvBNReLU: depthwise ConvBN (bias) + pointwise ConvBNReLU (bias)
        return nn.Sequential(
            _conv_bn(cin, cin, 3, padding=dilation, dilation=dilation, groups=cin, bias=True, act=False),
            _conv_bn(cin, cout, 1, bias=True),
        )

    class ASPP(nn.Layer):
        def __init__(self, cin: int, cout: int = 256, ratios: tuple[int, ...] = (1, 12, 24, 36)) -> None:
            super().__init__()
            self.aspp_blocks = nn.LayerList(
                [_conv_bn(cin, cout, 1, bias=True) if r == 1 else sep_conv(cin, cout, r) for r in ratios]
            )
            self.global_avg_pool = nn.Sequential(nn.AdaptiveAvgPool2D(1), _conv_bn(cin, cout, 1))
            self.conv_bn_relu = _conv_bn(cout * (len(ratios) + 1), cout, 1, bias=True)
            self.dropout = nn.Dropout(0.1)

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            size = x.shape[-2:]
            outs = [
                F.interpolate(block(x), size=size, mode="bilinear", align_corners=False) for block in self.aspp_blocks
            ]
            outs.append(F.interpolate(self.global_avg_pool(x), size=size, mode="bilinear", align_corners=False))
            return self.dropout(self.conv_bn_relu(paddle.concat(outs, axis=1)))

    class Decoder(nn.Layer):
        def __init__(self, low_channels: int) -> None:
            super().__init__()
            self.conv_bn_relu1 = _conv_bn(low_channels, 48, 1, bias=True)
            self.conv_bn_relu2 = sep_conv(304, 256)
            self.conv_bn_relu3 = sep_conv(256, 256)
            self.conv = nn.Conv2D(256, num_classes, 1)

        def forward(self, x: paddle.Tensor, low: paddle.Tensor) -> paddle.Tensor:
            low = self.conv_bn_relu1(low)
            x = F.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
            x = paddle.concat([x, low], axis=1)
            return self.conv(self.conv_bn_relu3(self.conv_bn_relu2(x)))

    class DeepLabV3P(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = ResNet50Vd()
            self.aspp = ASPP(self.backbone.feat_channels[3])
            self.decoder = Decoder(self.backbone.feat_channels[0])

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            feats = self.backbone(x)
            logit = self.decoder(self.aspp(feats[3]), feats[0])
            return F.interpolate(logit, size=x.shape[-2:], mode="bilinear", align_corners=False)

    return DeepLabV3P()


# ---------------------------------------------------------------------------------------------- Transformer big
def transformer_big(
    src_len: int = 128,
    tgt_len: int = 128,
    vocab_size: int = WMT14_ENDE_VOCAB,
    max_length: int = 1024,
    dropout: float = 0.1,
    normalize_before: bool = True,
    bos_id: int = 0,
) -> paddle.nn.Layer:
    """Transformer "big" encoder-decoder for WMT14 en-de, as PaddleNLP's ``TransformerModel`` runs it.

    Architecture: Vaswani et al. 2017 "Attention Is All You Need" (arXiv 1706.03762) table 3 "big": 6 encoder
    and 6 decoder layers, d_model 1024, FFN 4096 (ReLU), 16 heads, dropout 0.1 (on embeddings, attention
    probabilities, the FFN activation and every residual branch), shared source/target/output embedding, scaled
    by sqrt(d_model), plus sinusoidal positions. Written after PaddleNLP
    ``paddlenlp/transformers/transformer/modeling.py`` (``TransformerModel``: ``paddle.nn.Transformer`` with
    ``normalize_before=True``, logits = decoder output x word-embedding^T) with config
    ``examples/machine_translation/transformer/configs/transformer.big.yaml``. Attention is functional
    (separate q/k/v/out ``nn.Linear`` as in ``paddle.nn.MultiHeadAttention``, ``paddle.matmul``, ``F.softmax``;
    no fused kernels). Padding positions (id == ``bos_id``, PaddleNLP's pad) are masked in encoder
    self-attention and cross-attention; decoder self-attention is causal.

    Inputs: ``src_ids`` int64[src_len] and ``tgt_ids`` int64[tgt_len] token ids in [0, vocab_size).
    Output: float32 (N, tgt_len, vocab_size) logits.

    Args:
        src_len, tgt_len: per-sample sequence lengths the model is meant for (stored as ``input_specs``; the
            model accepts any length up to ``max_length``, the rows of the position table).
        vocab_size: shared vocabulary; default 33712 = PaddleNLP's WMT14 en-de BPE vocabulary
            (``vocab_all.bpe.33708`` padded to a multiple of ``pad_factor`` 8; the benchmark loads
            ``vocab_all.bpe.33712``).
        normalize_before: pre-LayerNorm (PaddleNLP, and fairseq's ``transformer_wmt_en_de_big_t2t`` of the DLE
            rows) with a final LayerNorm after each stack; False = the paper's post-LayerNorm, no final norms.

    Assumptions:
        - Both measured implementations are pre-norm, so that is the default (it only moves LayerNorms and adds
          two final ones: +4096 parameters). The DLE (fairseq) rows use their own joined BPE dictionary, whose
          size is not in the source; the PaddleNLP vocabulary is used for both.
        - The sinusoidal table is a non-trainable buffer, not a parameter (PaddleNLP keeps it as an embedding
          weight whose output has ``stop_gradient``, so it gets no gradient but is in its parameter list:
          +1,048,576 "parameters" in that count).
        - Per-sample length 128 is a modelling choice: the published runs use token batches (max_tokens 5120
          for Paddle, 10240/5120/2560 for DLE), i.e. about max_tokens / L sentence pairs padded to length L, with
          L varying per batch (sorted by length).
    """
    import numpy as np
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    d_model, n_head, d_inner, n_layer = 1024, 16, 4096, 6
    head_dim = d_model // n_head
    table_rows = max(max_length, src_len, tgt_len)

    def sinusoid_table(n_position: int, channels: int) -> np.ndarray:
        # PaddleNLP position_encoding_init (tensor2tensor layout: [sin | cos])
        num_timescales = channels // 2
        log_inc = np.log(1e4) / (num_timescales - 1)
        inv = np.exp(np.arange(num_timescales) * -log_inc)
        scaled = np.arange(n_position)[:, None] * inv[None, :]
        return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype("float32")

    class MultiHeadAttention(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = nn.Linear(d_model, d_model)
            self.k_proj = nn.Linear(d_model, d_model)
            self.v_proj = nn.Linear(d_model, d_model)
            self.out_proj = nn.Linear(d_model, d_model)
            self.dropout = nn.Dropout(dropout)

        def split_heads(self, x: paddle.Tensor) -> paddle.Tensor:
            return x.reshape([x.shape[0], x.shape[1], n_head, head_dim]).transpose([0, 2, 1, 3])

        def forward(self, query: paddle.Tensor, memory: paddle.Tensor, bias: paddle.Tensor) -> paddle.Tensor:
            b, s = query.shape[0], query.shape[1]
            q = self.split_heads(self.q_proj(query)) * (head_dim**-0.5)
            k = self.split_heads(self.k_proj(memory))
            v = self.split_heads(self.v_proj(memory))
            scores = paddle.matmul(q, k, transpose_y=True) + bias  # (b, heads, s, s_kv)
            probs = self.dropout(F.softmax(scores, axis=-1))
            ctx = paddle.matmul(probs, v).transpose([0, 2, 1, 3]).reshape([b, s, d_model])
            return self.out_proj(ctx)

    class FeedForward(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.linear1 = nn.Linear(d_model, d_inner)
            self.act = nn.ReLU()
            self.dropout = nn.Dropout(dropout)
            self.linear2 = nn.Linear(d_inner, d_model)

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            return self.linear2(self.dropout(self.act(self.linear1(x))))

    class EncoderLayer(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn, self.ffn = MultiHeadAttention(), FeedForward()
            self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

        def forward(self, x: paddle.Tensor, src_bias: paddle.Tensor) -> paddle.Tensor:
            if normalize_before:
                h = self.norm1(x)
                x = x + self.dropout1(self.self_attn(h, h, src_bias))
                return x + self.dropout2(self.ffn(self.norm2(x)))
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, src_bias)))
            return self.norm2(x + self.dropout2(self.ffn(x)))

    class DecoderLayer(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn, self.cross_attn, self.ffn = MultiHeadAttention(), MultiHeadAttention(), FeedForward()
            self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

        def forward(
            self, x: paddle.Tensor, memory: paddle.Tensor, causal: paddle.Tensor, src_bias: paddle.Tensor
        ) -> paddle.Tensor:
            if normalize_before:
                h = self.norm1(x)
                x = x + self.dropout1(self.self_attn(h, h, causal))
                x = x + self.dropout2(self.cross_attn(self.norm2(x), memory, src_bias))
                return x + self.dropout3(self.ffn(self.norm3(x)))
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, causal)))
            x = self.norm2(x + self.dropout2(self.cross_attn(x, memory, src_bias)))
            return self.norm3(x + self.dropout3(self.ffn(x)))

    class TransformerBig(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.word_embedding = nn.Embedding(vocab_size, d_model, padding_idx=bos_id)
            self.register_buffer("pos_table", paddle.to_tensor(sinusoid_table(table_rows, d_model)))
            self.emb_dropout = nn.Dropout(dropout)
            self.encoder = nn.LayerList([EncoderLayer() for _ in range(n_layer)])
            self.decoder = nn.LayerList([DecoderLayer() for _ in range(n_layer)])
            self.encoder_norm = nn.LayerNorm(d_model) if normalize_before else None
            self.decoder_norm = nn.LayerNorm(d_model) if normalize_before else None
            self.input_specs = (f"int64[{src_len}]:{vocab_size}", f"int64[{tgt_len}]:{vocab_size}")

        def embed(self, ids: paddle.Tensor) -> paddle.Tensor:
            s = ids.shape[1]
            if s > table_rows:
                raise ValueError(f"sequence length {s} exceeds the position table ({table_rows} rows)")
            pos = (ids != bos_id).astype("int64") * paddle.arange(s, dtype="int64")
            pos_emb = F.embedding(pos, self.pos_table)
            pos_emb.stop_gradient = True
            return self.emb_dropout(self.word_embedding(ids) * (d_model**0.5) + pos_emb)

        def forward(self, src_ids: paddle.Tensor, tgt_ids: paddle.Tensor) -> paddle.Tensor:
            t = tgt_ids.shape[1]
            src_bias = ((src_ids == bos_id).astype("float32") * -1e9).unsqueeze([1, 2])  # (b, 1, 1, s)
            causal = paddle.triu(paddle.full([t, t], -1e9, dtype="float32"), diagonal=1)  # (t, t)
            x = self.embed(src_ids)
            for layer in self.encoder:
                x = layer(x, src_bias)
            memory = self.encoder_norm(x) if self.encoder_norm is not None else x
            y = self.embed(tgt_ids)
            for layer in self.decoder:
                y = layer(y, memory, causal, src_bias)
            if self.decoder_norm is not None:
                y = self.decoder_norm(y)
            return paddle.matmul(y, self.word_embedding.weight, transpose_y=True)

    return TransformerBig()


#: key -> (factory, default per-sample input specs). The factories take keyword arguments (see their docstrings).
BENCH_MODELS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "ssd300": (ssd300, ("float32[3,300,300]",)),
    "unet_medical": (unet_medical, ("float32[1,572,572]",)),
    "hrnet_w18_fcn": (hrnet_w18_fcn, ("float32[3,512,1024]",)),
    "deeplabv3p_resnet50_vd": (deeplabv3p_resnet50_vd, ("float32[3,512,1024]",)),
    "transformer_big": (transformer_big, (f"int64[128]:{WMT14_ENDE_VOCAB}", f"int64[128]:{WMT14_ENDE_VOCAB}")),
}

#: key -> (published parameter count or None, where it comes from), for the check in :func:`main`.
PUBLISHED_PARAMS: dict[str, tuple[int | None, str]] = {
    "ssd300": (None, "no count published by DLE"),
    "unet_medical": (31_030_000, "Ronneberger et al. 2015 U-Net with 2x2 up-convs (commonly quoted ~31.0M)"),
    "hrnet_w18_fcn": (
        9_675_306,
        "paddle.flops 'Total Params' in PaddlePaddle/Perf HRNetW18/logs/paddle/"
        "Hrnet_FP32_BS8-N1.log (includes BN running mean/var)",
    ),
    "deeplabv3p_resnet50_vd": (
        26_794_243,
        "paddle.flops 'Total Params' in PaddlePaddle/Perf DeepLabV3P/logs/"
        "paddle/Deeplabv3_FP32_BS4-N1.log (includes BN running mean/var)",
    ),
    "transformer_big": (213_000_000, "Vaswani et al. 2017 table 3 (37000-token vocabulary, post-norm)"),
}


def _param_counts(model: paddle.nn.Layer) -> tuple[int, int]:
    """(trainable parameters, all parameters incl. BN running mean/var) of ``model`` (shared ones once)."""
    trainable = total = 0
    for p in model.parameters():
        n = int(p.numel())
        total += n
        if not p.stop_gradient:
            trainable += n
    return trainable, total


def _random_inputs(specs: tuple[str, ...], batch: int) -> list[paddle.Tensor]:
    """Random tensors of ``batch`` samples for paddlefit input spec strings."""
    import paddle

    from paddlefit.jobspec.inputs import parse_input_spec

    out = []
    for text in specs:
        spec = parse_input_spec(text)
        shape = [batch, *spec.shape]
        if spec.dtype.startswith("int"):
            out.append(paddle.randint(0, spec.high or 2, shape, dtype=spec.dtype))
        else:
            out.append(paddle.randn(shape, dtype=spec.dtype))
    return out


def main(argv: list[str] | None = None) -> None:
    """Build each model, run forward passes on CPU and print shapes, parameter counts and wall times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(BENCH_MODELS), help="keys of BENCH_MODELS (default: all)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 2], help="batch sizes (default: 1 2)")
    args = parser.parse_args(argv)

    import paddle

    paddle.set_device("cpu")
    paddle.seed(0)
    for key in args.models:
        factory, specs = BENCH_MODELS[key]
        t0 = time.perf_counter()
        model = factory()
        build_s = time.perf_counter() - t0
        trainable, total = _param_counts(model)
        published, where = PUBLISHED_PARAMS[key]
        if published:
            vs = f"{published:,} ({trainable / published:.3f}x trainable, {total / published:.3f}x all)"
        else:
            vs = "-"
        print(f"{key}: inputs {', '.join(specs)}; built in {build_s:.1f} s")
        print(f"  params: trainable {trainable:,}, all {total:,}; published {vs} [{where}]")
        for batch in args.batch:
            inputs = _random_inputs(specs, batch)
            with paddle.no_grad():
                t0 = time.perf_counter()
                out = model(*inputs)
                wall = time.perf_counter() - t0
            outs = out if isinstance(out, tuple | list) else (out,)
            shapes = ", ".join(str(list(o.shape)) for o in outs)
            print(f"  batch {batch}: output {shapes}; forward {wall:.2f} s")
        del model


if __name__ == "__main__":
    main()
