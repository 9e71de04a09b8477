"""A memory system that lives outside allmem's own packages, with its config in its own folder
(``examples/my_memory/configs``). Copy this folder anywhere, put its parent on ``PYTHONPATH`` and its ``configs``
folder in ``ALLMEM_CONFIG_PATH``: ``allmem run method=my_memory``, ``make table1`` and the summarise step then
include it (docs/LIBRARY.md, "Your own system in every target")."""
