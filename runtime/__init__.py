"""Process management shared by the launcher, tests, benchmarks and fault drills: the embedded
Redis-protocol server, the launcher, and one stack + client harness."""
