"""The studies: what compares encodings over tasks' runs, each a `python -m` entry point.

sweep (train and tabulate a comparison), length_generalisation (scores by input length or depth), report (the
results summary), trained_at_length, diagnostics (what encodings give positions), benchmark (step speed).
Studies read tasks through the task registry (`lra_posenc.tasks`); no task imports a study.
"""
