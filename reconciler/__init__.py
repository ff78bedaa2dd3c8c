"""nodus-gitops: a GitOps reconciler for Nodus Job, Pipeline and Sweep manifests."""

__version__ = "0.1.0"
