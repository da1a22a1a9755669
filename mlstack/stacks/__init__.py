"""Deployment units. Each stack composes constructs; the blueprint decides which stacks exist."""
