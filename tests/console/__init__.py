"""The web console's tests, its pages in a real Chromium where one is installed."""
