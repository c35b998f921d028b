"""Gating a stored run: what a look costs, `evalsuite compare` at scale, where the pairs carry signal."""
