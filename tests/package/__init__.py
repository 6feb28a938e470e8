"""The tests of package."""
