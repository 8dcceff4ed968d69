"""Elastic training for Keras: ``hvd.elastic.KerasState``, ``hvd.elastic.run`` and the callbacks
that keep the state's epoch/batch current and commit it during ``model.fit``.

::

    state = hvd.elastic.KerasState(model, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, epochs=epochs - state.epoch, callbacks=[
            hvd.elastic.UpdateEpochStateCallback(state),
            hvd.elastic.UpdateBatchStateCallback(state),
            hvd.elastic.CommitStateCallback(state, batches_per_commit=10)])
"""

import keras

from hvdlite.tensorflow.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                                        HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                                        HvdliteRanksLostError, ObjectState, State,
                                        TensorFlowKerasState, run)


class KerasState(TensorFlowKerasState):
    """Horovod's name for the Keras model state (``hvdlite.tensorflow.keras.elastic``)."""


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` after every ``batches_per_commit`` batches (and checks host updates)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError(f"batches_per_commit must be >= 1, got {batches_per_commit}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` = the batches completed in the current epoch (0 at its end).

    Unlike Horovod's (which stores the index of the last batch), the count is what a resumed
    epoch skips: after a reset, start the epoch's data at ``state.batch``.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.first = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.first = self.state.batch   # a resumed epoch starts here

    def on_batch_end(self, batch, logs=None):
        self.state.batch = self.first + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        self.first = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` = the epochs completed, counted across resets.

    Keras numbers a ``fit``'s epochs from 0 (or ``initial_epoch``); the state counts from
    where the training began, so after a reset ``fit(epochs=total - state.epoch)`` resumes.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch
        self.fit_first_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.fit_first_epoch is None:
            self.fit_first_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + (epoch - self.fit_first_epoch) + 1


__all__ = ["KerasState", "TensorFlowKerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "ObjectState", "State",
           "run", "HorovodInternalError", "HostsUpdatedInterrupt"]
