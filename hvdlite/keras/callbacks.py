"""Alias of :mod:`hvdlite.tensorflow.keras.callbacks`."""

from hvdlite.tensorflow.keras.callbacks import *  # noqa: F401,F403
from hvdlite.tensorflow.keras.callbacks import (  # noqa: F401
    BroadcastGlobalVariablesCallback, LearningRateScheduleCallback,
    LearningRateWarmupCallback, MetricAverageCallback)
