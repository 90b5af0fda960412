"""The admission webhook's HTTPS server (the decisions are `quotaguard.admission`'s)."""
