"""Other-language editions of the course, built from the English notebooks (see build.py)."""
