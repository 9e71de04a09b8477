"""allmem: reference harness and library for All-Mem."""

__version__ = "0.1.0"
