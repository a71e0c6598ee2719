"""Fairlane's client: the placement API (:mod:`fairlane.client`), the ``fairlane run``
launcher (:mod:`fairlane.cli`), in-process progress reporting (:mod:`fairlane.progress`)
and the nvidia-resiliency-ext adapter (:mod:`fairlane.nvrx`). docs/launcher.md."""
