"""The Keras callbacks, written once for every backend in :mod:`hvdlite.keras.callbacks`."""

from hvdlite.keras.callbacks import (BroadcastGlobalVariablesCallback,  # noqa: F401
                                     LearningRateScheduleCallback,
                                     LearningRateWarmupCallback, MetricAverageCallback)
