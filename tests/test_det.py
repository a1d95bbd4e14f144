"""paddlefit.examples.det: the detection samples as ppdet's architectures take them, exactly; bad arguments name the
field."""

import numpy as np
import pytest

from paddlefit.errors import PaddlefitError
from paddlefit.examples.det import box_images, picodet_s


def test_box_samples_are_padded_int64_boxes_inside_the_image():
    ds = box_images(n=6, size=192, boxes=3, classes=4, seed=1)
    assert len(ds) == 6
    for i in range(6):
        s = ds[i]
        assert s["image"].shape == (3, 192, 192) and s["image"].dtype == np.float32
        assert s["gt_class"].dtype == np.int64 and s["gt_class"].shape == (3, 1)  # ppdet 2.6.0's assigners: int64
        real = s["pad_gt_mask"][:, 0] == 1.0
        assert 1 <= real.sum() <= 3 and not s["gt_bbox"][~real].any()  # padding rows are zero, as PadGT pads
        x1, y1, x2, y2 = s["gt_bbox"][real].T
        assert (x1 >= 0).all() and (y1 >= 0).all() and (x2 <= 192).all() and (y2 <= 192).all()
        assert (x2 - x1 >= 192 // 10).all() and (s["gt_class"][real] < 4).all()
        assert s["im_shape"].tolist() == [192.0, 192.0] and s["scale_factor"].tolist() == [1.0, 1.0]
    # the same seed makes the same data
    a, b = box_images(n=2, size=192, seed=1), box_images(n=2, size=192, seed=1)
    assert np.array_equal(a[1]["gt_bbox"], b[1]["gt_bbox"]) and np.array_equal(a[1]["image"], b[1]["image"])


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n": 0}, "`data.*_args.n`"),
        ({"size": 128}, "`data.*_args.size`"),
        ({"size": 200}, "not a multiple of 64"),
        ({"boxes": True}, "`data.*_args.boxes`"),
    ],
)
def test_bad_dataset_arguments_name_the_field(kwargs, needle):
    with pytest.raises(PaddlefitError, match=needle.replace("*", r"\*").replace(".", r"\.")):
        box_images(**kwargs)


def test_bad_model_arguments_name_the_field():
    with pytest.raises(PaddlefitError, match=r"model_args\.num_classes"):
        picodet_s(num_classes=0)
