"""LRA ListOps: ten-way classification of nested list-operation expressions."""
