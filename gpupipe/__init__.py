"""gpupipe: web crawl → curated documents → packed token shards, on GPU (RAPIDS) or CPU."""

__version__ = "0.1.0"
