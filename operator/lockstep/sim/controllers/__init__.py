"""Simulated controllers, one module each: what kube-controller-manager, the kubelet and a DRA driver
do where lockstep relies on them."""
