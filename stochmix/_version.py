"""The package version, in a module of its own so that any module can read it without
importing the package (and so without an import cycle)."""

#: The version of stochmix (the same as the installed distribution's).
__version__ = "0.1.0"
