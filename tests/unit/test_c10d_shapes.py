"""hvdlite.c10d.shapes: the size, split and count rules of c10d's collectives (on numpy
arrays: the rules read only ``shape`` and ``dtype``)."""

import numpy as np
import pytest

from hvdlite.c10d import shapes
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError

BAD = HvdliteInvalidArgumentError


def test_describe():
    assert shapes.describe(np.zeros((2, 3), np.float32)) == "shape [2, 3], dtype float32"


def test_one_tensor_per_rank_each_like_the_other_side():
    like = np.zeros(4, np.float32)
    checked = []
    shapes.check_per_rank("allgather", [np.zeros((2, 2), np.float32)] * 2, "output 0", like,
                          "input 0", 2, lambda x, label: checked.append(label))
    assert checked == ["output 0[0]", "output 0[1]"]
    with pytest.raises(BAD, match=r"allgather: output 0 is a list of 3 tensors for a group of "
                                  r"2 ranks"):
        shapes.check_per_rank("allgather", [like] * 3, "output 0", like, "input 0", 2,
                              lambda x, label: None)
    with pytest.raises(HvdliteUnsupportedError,
                       match=r"input 0\[1\] \(shape \[5\], dtype float32\) does not match "
                             r"output 0 \(shape \[4\], dtype float32\); equal blocks"):
        shapes.check_per_rank("x", [like, np.zeros(5, np.float32)], "input 0", like,
                              "output 0", 2, lambda x, label: None,
                              error=HvdliteUnsupportedError, why="; equal blocks")
    with pytest.raises(BAD, match=r"\[0\] \(shape \[4\], dtype float64\) does not match"):
        shapes.check_per_rank("x", [np.zeros(4), like], "l", like, "m", 2, lambda x, label: None)


def test_a_whole_of_size_blocks():
    out, whole = np.zeros(3, np.float32), np.zeros((2, 3), np.float32)
    shapes.check_blocks("rs", whole, "input 0", out, "output 0", 2)
    with pytest.raises(BAD, match=r"rs: input 0 \(shape \[2, 3\], dtype float32\) must hold 3 "
                                  r"blocks like output 0 \(shape \[3\], dtype float32\)"):
        shapes.check_blocks("rs", whole, "input 0", out, "output 0", 3)
    with pytest.raises(BAD, match="must hold 2 blocks like"):
        shapes.check_blocks("rs", whole.astype(np.float64), "input 0", out, "output 0", 2)
    shapes.check_blocks("ag", whole.astype(np.float64), "the output", out, "the input", 2,
                        same_dtype=False)
    with pytest.raises(BAD, match=r"ag: the output \(shape \[2, 3\], dtype float32\) must hold "
                                  r"4 times the input"):
        shapes.check_blocks("ag", whole, "the output", out, "the input", 4, same_dtype=False)


def test_all_to_all_single_splits():
    shapes.check_splits("a2a", 6, None, 3)
    shapes.check_splits("a2a", 5, [2, 3], 2)
    with pytest.raises(BAD, match="a2a: the input is a scalar"):
        shapes.check_splits("a2a", None, None, 2)
    with pytest.raises(BAD, match=r"dimension 0 of the input \(5\) does not divide into 2 "
                                  r"equal parts; pass input_split_sizes"):
        shapes.check_splits("a2a", 5, None, 2)


def test_what_arrived_is_what_the_outputs_take():
    shapes.check_received("a2a", "rows", [1, 2], [1, 2], "output_split_sizes is")
    with pytest.raises(BAD, match=r"a2a: received rows \[1, 2\] from the ranks, but "
                                  r"output_split_sizes is \[2, 1\]"):
        shapes.check_received("a2a", "rows", [1, 2], [2, 1], "output_split_sizes is")


def test_counts_and_dtypes_of_lists():
    shapes.check_one_dtype("a2a", [np.zeros(1), np.zeros(2)])
    with pytest.raises(BAD, match=r"a2a: the tensors mix dtypes \['float32', 'float64'\]"):
        shapes.check_one_dtype("a2a", [np.zeros(1), np.zeros(2, np.float32)])
    shapes.check_lists("agc", [2, 2, 2], 2, 3)
    with pytest.raises(BAD, match=r"agc: needs 3 output lists \(one per rank\) of 2 tensors "
                                  r"\(one per input\); got \[2, 1, 2\]"):
        shapes.check_lists("agc", [2, 1, 2], 2, 3)
    shapes.check_equal("broadcast", "rootTensor", 0, 0)
    with pytest.raises(HvdliteUnsupportedError,
                       match="broadcast: rootTensor is 1; the hvdlite backend takes 0"):
        shapes.check_equal("broadcast", "rootTensor", 1, 0, HvdliteUnsupportedError)
    with pytest.raises(BAD, match="gather: the number of output lists is 1; the hvdlite "
                                  "backend takes 2"):
        shapes.check_equal("gather", "the number of output lists", 1, 2)
