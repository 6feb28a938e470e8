"""The tests of participation."""
