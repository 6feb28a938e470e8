"""The tests of config and cli."""
