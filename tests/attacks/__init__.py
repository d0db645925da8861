"""The attack suite of issue 24 (a package, so its conftest does not shadow tests/conftest.py)."""
