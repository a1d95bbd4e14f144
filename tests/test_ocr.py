"""paddlefit.examples.ocr: the OCR examples' datasets go through PaddleOCR's own operators from encoded bytes, their
labels are what CTCLoss and DBLoss read, and bad arguments are clear errors. (Plan -> train -> export of the two shipped
examples: tests/test_real_models.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip(
    "unstructured_paddleocr", reason="PaddleOCR's training code (unstructured-paddleocr) is not installed"
)

from paddlefit.errors import PaddlefitError
from paddlefit.examples import ocr


def test_text_lines_are_encoded_bytes_decoded_by_paddleocr_into_ctc_labels() -> None:
    ds = ocr.text_lines(n=6, seed=3)
    assert all(isinstance(b, bytes) and b[:4] == b"\x89PNG" for b in ds.images)
    for i in range(len(ds)):
        s = ds[i]
        x, text, length = s["x"], s["label"]["text"], int(s["label"]["length"])
        assert x.shape == (3, 32, 100) and x.dtype == np.float32
        assert x.min() >= -1.0 and x.max() <= 1.0  # RecResizeImg's (x / 255 - 0.5) / 0.5
        assert text.shape == (25,) and text.dtype == np.int64 and length == len(ds.texts[i])
        assert list(text[:length]) == [ocr.CHARSET.index(c) + 1 for c in ds.texts[i]]  # id 0 is the blank
        assert not text[length:].any()
    jpeg = ocr.text_lines(n=2, encoding=".jpg", image_shape=(3, 48, 160))
    assert jpeg.images[0][:2] == b"\xff\xd8" and jpeg[0]["x"].shape == (3, 48, 160)


def test_text_boxes_maps_come_from_paddleocr_label_ops_on_the_polygons() -> None:
    ds = ocr.text_boxes(n=3, size=96, seed=2)
    assert all(b[:2] == b"\xff\xd8" for b in ds.images)
    for i in range(len(ds)):
        s = ds[i]
        assert s["x"].shape == (3, 96, 96) and s["x"].dtype == np.float32
        maps = s["label"]
        assert list(maps) == ["threshold_map", "threshold_mask", "shrink_map", "shrink_mask"]
        assert all(m.shape == (96, 96) and m.dtype == np.float32 for m in maps.values())
        shrink = maps["shrink_map"] > 0
        inside = np.zeros_like(shrink)
        for box in json.loads(ds.labels[i]):
            (x0, y0), (x1, y1) = box["points"][0], box["points"][2]
            assert shrink[(y0 + y1) // 2, (x0 + x1) // 2]  # the box's centre is text
            inside[y0 : y1 + 1, x0 : x1 + 1] = True
        assert not (shrink & ~inside).any()  # shrunk polygons stay inside their boxes
        assert maps["threshold_map"].min() == pytest.approx(0.3) and maps["threshold_map"].max() <= 0.7 + 1e-6


def test_losses_are_paddleocrs_on_our_labels_and_reject_other_labels() -> None:
    import paddle

    rng = np.random.default_rng(0)
    text = paddle.to_tensor(np.array([[3, 4, 5, 0], [7, 0, 0, 0]], dtype="int64"))
    label = {"text": text, "length": paddle.to_tensor(np.array([3, 1], dtype="int64"))}
    logits = paddle.to_tensor(rng.standard_normal((2, 25, 37)).astype("float32"))
    loss = ocr.ctc_loss(logits, label)
    assert loss.shape == [] and float(loss) > 0
    # CTCHead's eval output is the softmax of its logits: the same loss
    probs = paddle.nn.functional.softmax(logits, axis=-1)
    assert float(ocr.ctc_loss(probs, label)) == pytest.approx(float(loss), rel=1e-4)

    maps = {
        k: paddle.to_tensor(rng.uniform(0, 1, (2, 64, 64)).astype("float32"))
        for k in ("threshold_map", "threshold_mask", "shrink_map", "shrink_mask")
    }
    train = ocr.db_loss({"maps": paddle.to_tensor(rng.uniform(0, 1, (2, 3, 64, 64)).astype("float32"))}, maps)
    evaluation = ocr.db_loss({"maps": paddle.to_tensor(rng.uniform(0, 1, (2, 1, 64, 64)).astype("float32"))}, maps)
    assert train.shape == [] and evaluation.shape == [] and float(train) > 0 and float(evaluation) > 0

    with pytest.raises(PaddlefitError, match=r"`ctc_loss` needs the label dict .*\(key 'text'\).*shrink_map"):
        ocr.ctc_loss(logits, maps)
    with pytest.raises(PaddlefitError, match=r"`db_loss` needs the label dict .*\(key 'threshold_map'\)"):
        ocr.db_loss({"maps": logits}, label)
    with pytest.raises(PaddlefitError, match="DBHead's output dict"):
        ocr.db_loss(logits, maps)


@pytest.mark.parametrize(
    ("fn", "args", "match"),
    [
        ("text_lines", {"n": 0}, "n must be >= 1"),
        ("text_lines", {"max_chars": 30}, r"need 1 <= min_chars <= max_chars <= max_text_length \(got 3, 30, 25\)"),
        ("text_lines", {"min_chars": 0}, r"need 1 <= min_chars .* \(got 0, 10, 25\)"),
        ("text_lines", {"image_shape": (1, 32, 100)}, r"image_shape must be \[3, H, W\]"),
        ("text_lines", {"encoding": "png"}, "encoding must be one of .png, .jpg"),
        ("text_boxes", {"size": 100}, "size must be a multiple of 32"),
        ("text_boxes", {"max_boxes": 0}, "max_boxes must be >= 1"),
        ("text_boxes", {"encoding": ".bmp"}, "encoding must be one of"),
    ],
)
def test_bad_dataset_arguments_are_clear_errors(fn: str, args: dict, match: str) -> None:
    with pytest.raises(PaddlefitError, match=f"OCR dataset `{fn}`: {match}"):
        getattr(ocr, fn)(**args)


def test_a_sample_paddleocr_rejects_is_an_error_naming_it() -> None:
    ds = ocr.text_lines(n=2)
    ds.images[1] = b"not an image"  # cv2.imdecode fails: DecodeImage returns None
    with pytest.raises(PaddlefitError, match="PaddleOCR's transforms rejected sample 1"):
        ds[1]
    boxes = ocr.text_boxes(n=1, size=64)
    boxes.labels[0] = "[]"  # DetLabelEncode returns None for a label without boxes
    with pytest.raises(PaddlefitError, match="rejected sample 0"):
        boxes[0]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"seed": -1}, "`seed` must be a whole number"),
        ({"n": True}, "`n` must be a whole number"),
        ({"image_shape": "3,32,100"}, "`image_shape` must be [3, H, W]"),
        ({"image_shape": [3, 32.5, 100]}, "`image_shape[1]` must be"),
    ],
)
def test_text_line_arguments_of_the_wrong_type_name_the_field(kwargs, needle):
    with pytest.raises(PaddlefitError) as e:
        ocr.text_lines(**kwargs)
    assert needle in str(e.value)
