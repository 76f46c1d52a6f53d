"""Benchmarks through the API: load generator, completion watcher, ceiling client, results, plot."""
