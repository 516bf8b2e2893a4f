"""The controller's model: what it knows of each job and how to read it, below every other part.

The shared context (``context``: settings, database, backend, clock, mutex, the one phase writer
``Context.move``), who calls (``identity``, ``jobtokens``), a job's stored spec parsed once
(``specs``), its placement (``placement``), the scheduler's view of a job row (``job_rows``), the
cluster's capacity (``capacity``), limits (``limits``), views for people (``views``), the adaptive
batch plans (``batches``), the metrics, the history and the disk book, the forecast board, the
task-queue rows and the SampleSet references. Imports nothing else of the controller: the services
and the loop both stand on it, and the platform wires them.
"""
