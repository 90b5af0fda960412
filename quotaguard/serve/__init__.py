"""`quotaguard serve`: the process, its HTTP server, policy store, TLS reload, metrics, logs."""
