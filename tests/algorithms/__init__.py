"""The tests of algorithms."""
