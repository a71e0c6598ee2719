"""Kubernetes edges of the scheduler: the API client, the pod watch behind the
extender's ledger, and the binder of its bind verb (docs/kubernetes.md)."""
