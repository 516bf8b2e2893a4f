"""The Kubernetes backend: a ``TrainingJob`` custom resource reconciled into Pods by an operator.

Design, field names and the reconcile rules: ``docs/kubernetes.md``. The modules ``crd``, ``spec``,
``pods``, ``status`` and ``objects`` are pure (plain dicts in and out); only the modules that talk to a
cluster import ``kubernetes`` / ``kopf`` (the optional extra ``kubernetes``), and only lazily.
"""
