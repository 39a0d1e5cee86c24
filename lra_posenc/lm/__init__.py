"""Causal language modelling: text, a character or byte vocabulary, a decoder-only Transformer, loss per token."""
