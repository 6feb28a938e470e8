"""The tests of problems."""
