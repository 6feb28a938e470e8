"""The tests of mixing."""
