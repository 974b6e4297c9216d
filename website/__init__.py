"""The course as a static website (see build.py)."""
