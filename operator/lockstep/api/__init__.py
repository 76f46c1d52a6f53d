"""Typed models of the Kubernetes objects lockstep reads and writes."""
