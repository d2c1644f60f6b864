"""The package version: the one place it is written.

pyproject.toml reads it from here (hatchling's dynamic version); aotc.__version__ and
the generated headers take it from here too.  Kept apart from aotc/__init__.py so a
module inside aotc can read it without importing the package root (which reaches the
driver and so everything else).
"""

__version__ = "0.1.0"
