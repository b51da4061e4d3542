"""The package version (one place: the records key runs by it)."""

__version__ = "0.1.0"
