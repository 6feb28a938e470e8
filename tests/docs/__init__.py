"""The tests of docs."""
