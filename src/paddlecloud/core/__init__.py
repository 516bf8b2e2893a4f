"""The domain core: quantities, names, resources, job phases and the env contract.

Pure code with no I/O. Every other server-side layer builds on it; see ``docs/architecture.md``.
"""
