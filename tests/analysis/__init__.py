"""The tests of analysis."""
