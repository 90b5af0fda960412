"""quotaguard: GPU queue-and-quota policy for Kubernetes."""

__version__ = "0.1.0"
