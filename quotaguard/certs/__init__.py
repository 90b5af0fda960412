"""Webhook serving certificates: pure builders and checks (the `certs` verb drives them)."""
