"""Everything a reader sees: the page registry and the index (``pages``), figures (``plots``), the labels and tables
read from results (``results``), the claims and frontier sections (``claims``, ``frontier``), the notebooks'
helpers (``helpers``) and the checks every rendered page must pass (``checks``). Each module loads on first use."""
