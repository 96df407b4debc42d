"""Reporting: paper-style tables, plots, the HTML report, the seed study, the error-overlap probe and controls.

Reads run directories only through :class:`corl_bench.results.RunDir`; imports nothing from :mod:`corl_bench.train`.
Imports point one way (tests/test_architecture_on_cpu.py)::

    collect (read runs, regrade)   methods (how methods describe themselves)   reference (the paper's numbers)
        ^                               ^                                           ^
        +-- cells (table data) <- footer (protocol) <- kinds (text / vision-language, --reference paper)
                          ^
                       layout (blocks, rows, marks, build)
                          ^
                       render (md, LaTeX, CSV, HTML, rich)
                          ^
                       table (``corl-bench table``)  <-  html (``corl-bench report``, with plots)

collect keeps the newest run of a grid cell through duplicates; layout lists env.json differences through
environments (which reads collect's RunProtocol). study, plots and probe read through collect / results; overlap and
controls are pure functions of prediction rows.
"""
