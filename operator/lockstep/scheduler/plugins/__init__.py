"""Scheduler plugins: node resources, affinity, basics (name, cordon, taints), gang, dynamic resources."""
