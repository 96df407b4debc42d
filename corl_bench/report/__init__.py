"""Reporting: paper-style tables, plots, the HTML report, the seed study, the error-overlap probe and controls.
Reads run directories through :mod:`corl_bench.results`; imports nothing from :mod:`corl_bench.train`."""
