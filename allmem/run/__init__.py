"""The run lifecycle, from a config to a sealed run directory (docs/DESIGN.md, "Modules"). Nothing is imported
here, so importing one module loads only what it needs."""
