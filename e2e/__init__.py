"""End-to-end tests against a real control plane (etcd, kube-apiserver, kwok) on 127.0.0.1."""
