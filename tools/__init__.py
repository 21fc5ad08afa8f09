"""The generators of committed files: the ACP models and names, the configuration reference, the layout page."""
