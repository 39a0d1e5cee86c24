"""Transformer models shared by the tasks."""
