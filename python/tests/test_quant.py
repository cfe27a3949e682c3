"""Every block-quantized dtype from Python: astype to it and back is the
value within the format's rounding, and the names and codes are the C
enum's (tf_dtype values are ABI)."""
import math

import pytest

import tensorframe as tf

# The largest |x - decoded| a format allows on values in [-1, 1] (half a step
# of its scale, the scale's own rounding and the clipped codes of the
# formats whose extreme sits at the negative end: Q4_0's -8..7, Q3_K's -4..3).
BOUND = {"q4_0": 0.13, "q4_1": 0.1, "q8_0": 0.01, "q4_k": 0.1, "q6_k": 0.03, "q5_0": 0.05, "q5_1": 0.05,
         "q2_k": 0.4, "q3_k": 0.3, "q5_k": 0.05, "iq4_nl": 0.15, "iq4_xs": 0.15}
CODES = {"q4_0": 9, "q4_1": 10, "q8_0": 11, "q4_k": 12, "q6_k": 13, "q5_0": 14, "q5_1": 15, "q2_k": 16,
         "q3_k": 17, "q5_k": 18, "iq4_nl": 19, "iq4_xs": 20}


@pytest.mark.parametrize("name", sorted(BOUND))
def test_round_trip_within_the_format(name):
    dt = getattr(tf, name)
    assert dt.code == CODES[name] and str(dt.name) == name
    values = [math.sin(i * 0.37) * (0.5 + 0.5 * math.cos(i * 0.05)) for i in range(512)]
    x = tf.asarray(values, device="cpu")
    q = x.astype(dt)
    assert q.dtype == dt and q.shape == (512,)
    back = q.astype(tf.float32).tolist()
    err = max(abs(a - b) for a, b in zip(values, back))
    assert err <= BOUND[name], f"{name}: max error {err}"
    assert err > 0                                          # a rounding happened: not a float copy


def test_a_row_must_be_whole_blocks():
    with pytest.raises(tf.ShapeError):
        tf.asarray([0.0] * 64, device="cpu").astype(tf.q5_k)   # 64 is not a multiple of 256
