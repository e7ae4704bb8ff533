"""Exceptions of the simulator.

SimulatorError
 +-- DataError          a bundled or user data file is missing, corrupt or malformed
 +-- UnknownAttribute   the attribute (column) name does not exist
 +-- InvalidSetting     a simulation setting is out of range
"""

from __future__ import annotations


class SimulatorError(Exception):
    """Base of every error the simulator raises."""


class DataError(SimulatorError):
    """A data file is missing, fails its checksum, or cannot be parsed."""


class UnknownAttribute(SimulatorError, KeyError):
    """The attribute name is not a column of the data set."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class InvalidSetting(SimulatorError, ValueError):
    """A simulation setting (epsilon, delta, repetitions, mechanism, ...) is out of range."""
