"""Fairlane scorer: a Faust worker that turns node samples into per-GPU capacity scores."""
