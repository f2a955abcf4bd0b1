"""A stand-in for an engine patch file: the build checks it compiles and records its digest."""

PATCH_LEVEL = 1
