"""Typed errors raised at simulst's boundaries (audio input, model loading, options).

Every error a user can cause derives from :class:`SimulstError`; the CLI turns them into a one-line message and
a non-zero exit code instead of a traceback.
"""


class SimulstError(Exception):
    """Base class of all errors a user can cause."""


class AudioError(SimulstError):
    """The audio input is missing, unreadable, not audio, empty, or contains NaN/Inf."""


class ModelLoadError(SimulstError):
    """A model could not be found or loaded (unknown name, missing files, hub unreachable)."""


class OptionError(SimulstError):
    """An option has an invalid value (unknown policy name, negative chunk size, ...)."""


class DeviceError(AudioError):
    """An audio device cannot be used: no input device, an unknown one, PortAudio missing, or it failed to open."""
