"""Data generators."""
