"""Deployment checks that need no Docker engine and no cluster (issue 9)."""
