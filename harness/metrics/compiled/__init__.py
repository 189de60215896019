"""Numbers read from a compiled program: static metrics, on-target analysis, attribution by model scope,
collective causes."""
