"""The datasets, one module each: a module defines ``DATASET`` (a :class:`fairdp_core.data.spec.DatasetSpec`: its
raw files with their sha256, its groups, its builder and public schema, its class count) and gives the raw files'
origin in its docstring. The registry (:data:`fairdp_core.data.loaders.REGISTRY`) finds every module here, so adding
a dataset is adding a module."""
