"""The tests of timing."""
