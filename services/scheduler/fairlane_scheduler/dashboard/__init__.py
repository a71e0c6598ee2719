"""The fleet dashboard's page and assets (static files, served by ``api.dashboard``).

``static/vendor/`` holds uPlot 1.6.32 (MIT, by Leon Sorokin, npm ``uplot``), the
minified build ``dist/uPlot.iife.min.js`` and ``dist/uPlot.min.css`` copied unchanged
from the npm tarball, with its licence in ``uplot.LICENSE``: no CDN, clusters are often
offline.
"""
