"""Which measured job class a trace's job type behaves like, for per-class GPU speeds.

PAL measured each Longhorn V100 under four applications
(``fairlane_sim.class_speeds.CLASSES``); a GPU slow for one need not be slow for
another. Gavel's job types are mapped to the class whose bottleneck they share:

=====================  ==========  ===================================================
Gavel job type         class       why
=====================  ==========  ===================================================
ResNet-18, ResNet-50   resnet50    compute-bound convnets: the measured class itself
CycleGAN               resnet50    convolutional generators and discriminators
Transformer, LM        bert        attention / recurrent language models: BERT's mix
                                   of GEMMs and memory-bound layers
Recommendation         pagerank    embedding lookups: sparse, memory-bound, like PageRank
A3C                    resnet50    its GPU work is a small Atari convnet (the rest is
                                   CPU-side environment steps)
anything else          resnet50    the common case in the traces: a convnet
=====================  ==========  ===================================================

A job type matches by its name's prefix (Gavel's ``"LM (batch size 20)"`` is ``LM``).
"""

from __future__ import annotations

__all__ = ["DEFAULT_CLASS", "JOB_CLASSES", "job_class"]

#: Job-type prefix -> measured class (module docstring says why).
JOB_CLASSES: dict[str, str] = {
    "ResNet-18": "resnet50",
    "ResNet-50": "resnet50",
    "CycleGAN": "resnet50",
    "Transformer": "bert",
    "LM": "bert",
    "Recommendation": "pagerank",
    "A3C": "resnet50",
}
DEFAULT_CLASS = "resnet50"


def job_class(job_type: str) -> str:
    """The class of ``job_type``: the longest matching prefix's, else :data:`DEFAULT_CLASS`."""
    matches = [p for p in JOB_CLASSES if job_type == p or job_type.startswith(p + " ")]
    return JOB_CLASSES[max(matches, key=len)] if matches else DEFAULT_CLASS
