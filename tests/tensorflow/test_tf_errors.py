"""In process: every error the core can raise reaches TensorFlow code as both its hvdlite
class and a ``tf.errors`` class (src/hvdlite/convert/tf_errors.py)."""
import pickle

import pytest

tf = pytest.importorskip("tensorflow")

from hvdlite import exceptions  # noqa: E402
from hvdlite.convert.tf_errors import native  # noqa: E402
import hvdlite.tensorflow as hvd  # noqa: E402


@pytest.mark.parametrize("code", sorted(exceptions.STATUS_TO_ERROR))
def test_each_core_error_is_also_a_tf_error(code):
    cls = exceptions.STATUS_TO_ERROR[code]
    error = native(cls("allreduce 'x': what went wrong"))
    assert isinstance(error, cls) and isinstance(error, tf.errors.OpError), type(error).__mro__
    assert str(error) == "allreduce 'x': what went wrong"
    assert type(error).__name__ == cls.__name__
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)


def test_a_lost_rank_is_an_internal_error_that_elastic_recovers_from():
    error = native(exceptions.HvdliteRanksLostError("a rank of the job was lost"))
    assert isinstance(error, hvd.HvdliteRanksLostError)
    assert isinstance(error, tf.errors.InternalError)
    assert isinstance(error, exceptions.HvdliteInternalError)   # what elastic.run catches


def test_graph_errors_naming_a_lost_rank_are_recovered_from():
    from hvdlite.convert.tf_errors import recoverable
    lost = tf.errors.InternalError(None, None, "HvdliteRanksLostError: rank 2 was lost")
    error = recoverable(lost)
    assert isinstance(error, exceptions.HvdliteRanksLostError) and str(error) == str(lost.message)
    internal = recoverable(tf.errors.UnknownError(None, None, "HvdliteInternalError: boom"))
    assert type(internal) is hvd.HvdliteInternalError
    eager = exceptions.HvdliteInternalError("raised eagerly")
    assert recoverable(eager) is eager
    assert recoverable(tf.errors.InvalidArgumentError(None, None, "bad shape")) is None
