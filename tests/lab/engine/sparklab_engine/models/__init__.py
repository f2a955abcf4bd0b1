"""Model implementations of the stand-in engine, looked up through registry.py."""
