"""One module per CLI verb: `register(subparsers)` adds the verb, `run(args) -> int` does it."""
