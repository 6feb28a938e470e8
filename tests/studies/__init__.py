"""The tests of studies."""
