"""The run lifecycle: from a config to a sealed run directory.

``files`` owns the run directory (its file names, reading and writing them), ``identity``
the run's hash and name, ``preflight`` the checks before the directory exists, ``attempts`` the lock, manifest
and resume, ``runner`` the Hydra entry point that drives a run, ``compare`` the comparison rule and the ``allmem compare`` command.
Nothing is imported here, so importing one module loads only what it needs.
"""
