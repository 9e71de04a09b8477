"""Examples for users of allmem (docs/LIBRARY.md): ``my_memory``, a memory system of your own with its config
folder and test; ``memory_server``, the reference memory service for ``method=http``."""
