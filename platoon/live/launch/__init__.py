"""Starting a live run: the bodies of ``platoon train``, ``platoon eval`` and ``platoon prestage`` (``command``), the
config they load (``train_config``), a run built from it (``build``: environments, task pool, policy layer, model,
trainer, service, workflow), what ``platoon train`` shows while it runs (``progress``), and the errors it exits on
(``errors``).

Importing this package imports nothing of its modules (``build`` and ``command`` import torch).
"""
