"""acpgate's benchmarks: ``make bench`` (``python -m bench``, see bench/__main__.py) runs them."""
