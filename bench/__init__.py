"""Benchmarks for Async Work Lab: `python -m bench [NAME …]` (or `python3 lab.py bench`).

Each benchmark drives the real stack (embedded valkey, the pool supervisor with real `rq worker`
processes, gunicorn) on 127.0.0.1, prints a table with a RATIO against a baseline measured in
the same run, and writes its numbers to `var/bench/NAME.json`.
"""
