"""The controller's services: what requests do, one module per resource.

Jobs (``jobs``), PFS files (``files``, ``files_local``), data task masters (``tasks``), users
(``users``), SampleSets (``samplesets``), quotas (``quotas``), adaptive-batch reports
(``adaptive``). They import the model and each other, never the loop (``controller.loop``): what
both need lives in the model. Use cases that span services live in ``controller.platform.wiring``.
"""
