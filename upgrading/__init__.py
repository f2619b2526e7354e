"""Build-time: UPGRADING.md, generated from what the stacks render compared with Modelplane v0.3.1."""
