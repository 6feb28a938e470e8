"""The tests of engine."""
