"""lra_posenc: comparing positional encodings in Transformers on LRA ListOps and translation."""
