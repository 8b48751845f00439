"""Recipes: one folder per dataset or experiment (``run.sh``, ``README.md`` with its measured results, and the
Python scripts it runs). A package so that, from the repository root, tests import the scripts' functions
(``from examples.wikihop import construct``) as users run them (``python examples/wikihop/construct.py``)."""
