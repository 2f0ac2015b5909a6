"""Pure core types of DRC: no I/O, and no imports of other drc packages."""
