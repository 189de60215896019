"""Numbers read from a measured trace: op events, per-device accounting, XSpace and Chrome readers, recompiles."""
