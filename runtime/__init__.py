"""Code that runs in AWS (Lambda handlers, lifecycle scripts, manifests), importable by its tests."""
