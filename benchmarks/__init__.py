"""Benchmarks: each module compares us with a named peer or limit in the same run."""
