"""The packages and their data; the rest of the metadata is in pyproject.toml.

A non-editable install (``pip install .``) must run without the checkout, so the repository's ``configs/`` and
the debug config's fixtures (``tests/fixtures/*_tiny.json``) ship inside the package as ``allmem/_configs`` and
``allmem/_fixtures`` (``allmem.paths`` finds them). They stay where they are in the checkout; pyproject.toml's
``packages.find`` cannot add mapped folders, hence this file.
"""

from setuptools import find_namespace_packages, setup

SHIPPED = {"allmem._configs": "configs", "allmem._fixtures": "tests/fixtures"}

setup(
    packages=[*find_namespace_packages(include=["allmem*", "baselines*", "benchmarks*"]), *SHIPPED],
    package_dir=SHIPPED,
    package_data={
        "allmem": ["llm/prompts/*.txt", "llm/prompts/*.md", "metrics/errata/*.yaml", "report/targets.ini"],
        "allmem._configs": ["**/*.yaml"],
        "allmem._fixtures": ["*_tiny.json"],
    },
)
