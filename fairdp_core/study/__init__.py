"""The study's campaigns: the claims and frontier runner (``claims``), the tuning grids (``tuning``), the clip-bound
study and its DP tuner (``clip_study``, ``clip_tuning``), and the DVC plumbing they share (``profile_dir``,
``lockfile``). Each module loads on first use."""
