import pytest

from paddlefit.errors import InputSpecError, UnknownNameError
from paddlefit.spec import OptimizerName, Precision, parse_enum, parse_input_spec


def test_parse_specs():
    s = parse_input_spec("float32[3,224,224]")
    assert (s.dtype, s.shape, s.bytes_per_sample) == ("float32", (3, 224, 224), 3 * 224 * 224 * 4)
    t = parse_input_spec(" int64[128]:30522 ")
    assert (t.shape, t.high, t.bytes_per_sample, str(t)) == ((128,), 30522, 1024, "int64[128]:30522")
    u = parse_input_spec("float32[]")  # one scalar per sample (a regression target, a class id)
    assert (u.shape, u.bytes_per_sample, str(u)) == ((), 4, "float32[]")


@pytest.mark.parametrize("bad", ["", "float32", "float32[3,x]", "float32[0,2]", "complex64[3]",
                                 "float32[3]:5", "[3,224]"])  # fmt: skip
def test_bad_specs(bad):
    with pytest.raises(InputSpecError):
        parse_input_spec(bad)


def test_enums():
    assert parse_enum(Precision, "BF16-O2", "--precision") is Precision.BF16_O2
    assert Precision.FP16_O1.level == "O1" and Precision.FP32.level == "O0"
    with pytest.raises(UnknownNameError, match="adamw"):
        parse_enum(OptimizerName, "lamb", "--optimizer")
