"""lra_posenc: comparing positional encodings in Transformers on LRA ListOps, translation and causal language
modelling."""
