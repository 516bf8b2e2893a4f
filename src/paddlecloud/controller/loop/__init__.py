"""The controller's loop: what moves jobs between requests, on its own threads.

The reconcile cycle (``reconciler``: snapshot, plan, ``effects``, ``failures``' isolation), the disk
watch (``diskwatch``), the SampleSets' lifecycle (``sampleset_loop``), the start-time forecaster
(``forecasts``) and the read view of what the scheduler sees (``cluster_view``). They import the
model, never the services (``controller.services``).
"""
