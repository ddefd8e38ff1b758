"""simulst: simultaneous speech translation by onlinizing offline models."""

__version__ = "0.1.0"
